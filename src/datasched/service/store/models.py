"""The store's tables, as SQLAlchemy 2 ORM models: users and groups, meta-job requests,
their elementary jobs, the packets done (the event ranges whose results are in), and the
file catalog (datasets and their files).

The packets table is what makes a restart safe: a range ``(job, url, start)`` is stored at
most once (a UNIQUE constraint), so a runner that replays a :class:`PacketDone` after a crash
changes nothing, and a restarted daemon hands each job the ranges already done.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Base",
    "CatalogDataset",
    "CatalogFile",
    "Group",
    "Job",
    "Packet",
    "Request",
    "User",
    "utcnow",
]


def utcnow() -> datetime:
    """Now, in UTC (what every timestamp of the store holds)."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """The declarative base; its metadata is what the migrations must build."""


class Group(Base):
    """A group of users (PROOF §3's groups): its ``priority`` and its ``quota`` share of the
    cluster's slots, applied by the scheduling core."""

    __tablename__ = "groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    priority: Mapped[float] = mapped_column(Float, default=1.0)
    quota: Mapped[float] = mapped_column(Float, default=1.0)


class User(Base):
    """A user. The token is shown once when made; the store keeps its id in clear (to find
    the user) and a salted SHA-256 of its secret part (see :mod:`datasched.service.users`).
    A removed user (``removed``: when) keeps their row, so that their requests keep their
    owner; no token is theirs any more."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    group_id: Mapped[int] = mapped_column(ForeignKey("groups.id"))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    token_id: Mapped[str] = mapped_column(String(32), unique=True)
    token_salt: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(128))
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    removed: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    group: Mapped[Group] = relationship(lazy="joined")


class Request(Base):
    """A meta-job request as submitted: its raw text and content type, its state, and for a
    refused one the errors (``[{field, reason}]``) its owner reads."""

    __tablename__ = "requests"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    raw: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(256), default="")
    errors: Mapped[list[Any]] = mapped_column(JSON, default=list)
    policy: Mapped[str | None] = mapped_column(String(64), nullable=True)
    split: Mapped[str | None] = mapped_column(String(16), nullable=True)
    result: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    """The merged result once it completed: bytes a worker made, never unpickled here."""
    result_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Why its results could not be merged (their owner reads it)."""
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    owner: Mapped[User] = relationship(lazy="joined")
    jobs: Mapped[list[Job]] = relationship(
        back_populates="request", order_by="Job.index", cascade="all, delete-orphan"
    )


class Job(Base):
    """An elementary job: its files (``[{url, n_events, n_bytes, tree, dataset,
    cached_on}]``), its work (``{kind, ...}``), the node it ran on, its state, and for a failed
    one its log and the file that failed."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(48), primary_key=True)
    request_id: Mapped[str] = mapped_column(ForeignKey("requests.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    files: Mapped[list[Any]] = mapped_column(JSON)
    work: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[float] = mapped_column(Float, default=1.0)
    log: Mapped[str] = mapped_column(Text, default="")
    failed_file: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    updated: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    request: Mapped[Request] = relationship(back_populates="jobs")


class Packet(Base):
    """A packet done: entries ``[start, stop)`` of ``url`` for a job, where it ran, what it
    read and cost, and its pickled result (None for a command's); ``created`` is when it was
    stored, ``started`` when it began on its worker (None: stored before the store kept it,
    or not reported): the difference is what the packet took, a job's start on the node
    included. ``slotted`` is when it got its slot there (its file fetched and the slot's CPU
    free; None: not known): from it, a file's run leaves out the wait behind other jobs'
    packets on the node, which the ETAs measure (docs/service-whatif.md)."""

    __tablename__ = "packets"
    __table_args__ = (UniqueConstraint("job_id", "url", "start", name="uq_packet_range"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    url: Mapped[str] = mapped_column(String(1024))
    start: Mapped[int] = mapped_column(BigInteger)
    stop: Mapped[int] = mapped_column(BigInteger)
    node: Mapped[str] = mapped_column(String(128))
    n_bytes: Mapped[int] = mapped_column(BigInteger)
    cpu_s: Mapped[float] = mapped_column(Float)
    result: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    slotted: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class CatalogDataset(Base):
    """A dataset of the catalog and its metadata (STAR's: run year, collision system, beam
    energy, detector and trigger configuration, free keywords; anything else in ``extra``)."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    year: Mapped[int | None] = mapped_column(Integer, nullable=True)
    system: Mapped[str | None] = mapped_column(String(64), nullable=True)
    energy_gev: Mapped[float | None] = mapped_column(Float, nullable=True)
    detector: Mapped[str | None] = mapped_column(String(256), nullable=True)
    trigger: Mapped[str | None] = mapped_column(String(256), nullable=True)
    keywords: Mapped[list[Any]] = mapped_column(JSON, default=list)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    files: Mapped[list[CatalogFile]] = relationship(
        back_populates="dataset", order_by="CatalogFile.id", cascade="all, delete-orphan"
    )


class CatalogFile(Base):
    """A file of a dataset: its (tertiary) URL, tree, events and bytes, and the nodes whose
    caches hold it."""

    __tablename__ = "files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    url: Mapped[str] = mapped_column(String(1024), unique=True)
    tree: Mapped[str | None] = mapped_column(String(256), nullable=True)
    n_events: Mapped[int] = mapped_column(BigInteger)
    n_bytes: Mapped[int] = mapped_column(BigInteger)
    cached_on: Mapped[list[Any]] = mapped_column(JSON, default=list)

    dataset: Mapped[CatalogDataset] = relationship(back_populates="files")
