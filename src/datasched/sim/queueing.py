"""Closed-form queueing results the simulator is checked against.

The processing farm with exponential job sizes is an M/M/c queue (ponce-hersch §3.1 names the
M/E_r/m family for Erlang sizes); these formulas give its mean waiting time in the queue.
"""

from __future__ import annotations

__all__ = ["erlang_c", "mm1_mean_wait", "mmc_mean_wait"]


def mm1_mean_wait(arrival_rate: float, service_rate: float) -> float:
    """Mean time in queue of M/M/1: rho / (mu - lambda)."""
    if not 0 < arrival_rate < service_rate:
        raise ValueError("arrival_rate: the queue is stable only for 0 < lambda < mu")
    rho = arrival_rate / service_rate
    return rho / (service_rate - arrival_rate)


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in M/M/c (Erlang's C formula), ``a = lambda/mu``."""
    if servers < 1:
        raise ValueError("servers: must be positive")
    if not 0 <= offered_load < servers:
        raise ValueError("offered_load: the queue is stable only for 0 <= a < c")
    # Sum a^k/k! iteratively (stable for large c).
    term = 1.0
    total = 1.0
    for k in range(1, servers):
        term *= offered_load / k
        total += term
    last = term * offered_load / servers  # a^c / c!
    tail = last * servers / (servers - offered_load)
    return tail / (total + tail)


def mmc_mean_wait(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean time in queue of M/M/c: C(c, a) / (c mu - lambda)."""
    a = arrival_rate / service_rate
    return erlang_c(servers, a) / (servers * service_rate - arrival_rate)
