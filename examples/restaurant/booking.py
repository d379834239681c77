"""The restaurant's booking system: a real SQLite database of tables and bookings.

The agent calls these functions as tools (examples/restaurant.yaml). The database is
``RESTAURANT_DB`` (default: restaurant.db beside this file), created and seeded with the
tables on first use. Every function returns a small dict the model reads; a caller's
mistake (a date in the past, a closed day) is an answer, not an exception.
"""

from __future__ import annotations

import datetime
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

OPEN, LAST_SEATING = datetime.time(12, 0), datetime.time(21, 0)
CLOSED_WEEKDAY = 0  # Monday
SITTING = datetime.timedelta(hours=2)
TABLES = [2, 2, 2, 4, 4, 4, 6, 8]  # seats at each table


def database() -> sqlite3.Connection:
    path = Path(os.environ.get("RESTAURANT_DB") or Path(__file__).with_name("restaurant.db"))
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS tables (id INTEGER PRIMARY KEY, seats INTEGER)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS bookings (reference TEXT PRIMARY KEY, name TEXT, "
        "phone TEXT, date TEXT, time TEXT, party_size INTEGER, table_id INTEGER, "
        "cancelled INTEGER DEFAULT 0)"
    )
    if not db.execute("SELECT COUNT(*) FROM tables").fetchone()[0]:
        db.executemany("INSERT INTO tables (seats) VALUES (?)", [(s,) for s in TABLES])
        db.commit()
    return db


def _when(date: str, time: str) -> datetime.datetime | str:
    """The sitting's start, or why it cannot be booked."""
    try:
        day = datetime.date.fromisoformat(date)
        at = datetime.time.fromisoformat(time)
    except ValueError:
        return "the date must be YYYY-MM-DD and the time 24-hour HH:MM"
    if day.weekday() == CLOSED_WEEKDAY:
        return "the restaurant is closed on Mondays"
    if not OPEN <= at <= LAST_SEATING:
        return "tables can be booked from 12:00 to 21:00"
    return datetime.datetime.combine(day, at)


def _free_table(db: sqlite3.Connection, start: datetime.datetime, party_size: int) -> int | None:
    """The smallest table seating the party that no booking holds at ``start``."""
    taken = set()
    for table_id, time in db.execute(
        "SELECT table_id, time FROM bookings WHERE date = ? AND cancelled = 0",
        (start.date().isoformat(),),
    ):
        other = datetime.datetime.combine(start.date(), datetime.time.fromisoformat(time))
        if abs(other - start) < SITTING:
            taken.add(table_id)
    for table_id, _ in db.execute(
        "SELECT id, seats FROM tables WHERE seats >= ? ORDER BY seats, id", (party_size,)
    ):
        if table_id not in taken:
            return table_id
    return None


def check_availability(date: str, time: str, party_size: int) -> dict[str, Any]:
    start = _when(date, time)
    if isinstance(start, str):
        return {"available": False, "reason": start}
    if party_size > max(TABLES):
        return {"available": False, "reason": f"the largest table seats {max(TABLES)}"}
    with database() as db:
        if _free_table(db, start, party_size) is not None:
            return {"available": True, "date": date, "time": time, "party_size": party_size}
        later = [start + datetime.timedelta(minutes=30 * k) for k in (-2, -1, 1, 2)]
        free = [t.strftime("%H:%M") for t in later
                if OPEN <= t.time() <= LAST_SEATING and _free_table(db, t, party_size)]  # fmt: skip
    return {"available": False, "reason": "fully booked then", "free_times": free}


def digits(phone: str) -> str:
    return re.sub(r"\D", "", str(phone))


def book_table(name: str, phone: str, date: str, time: str, party_size: int) -> dict[str, Any]:
    start = _when(date, time)
    if isinstance(start, str):
        return {"booked": False, "reason": start}
    with database() as db:
        same = db.execute(
            "SELECT reference FROM bookings WHERE phone = ? AND date = ? AND time = ? "
            "AND cancelled = 0",
            (digits(phone), date, time),
        ).fetchone()
        if same:  # booked already: the same booking, not a second one
            return {"booked": True, "reference": same[0], "date": date, "time": time}
        table = _free_table(db, start, party_size)
        if table is None:
            return {"booked": False, "reason": "fully booked then"}
        count = db.execute("SELECT COUNT(*) FROM bookings").fetchone()[0]
        reference = f"L{101 + count}"
        db.execute(
            "INSERT INTO bookings VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            (reference, name, digits(phone), date, time, party_size, table),
        )
    return {"booked": True, "reference": reference, "name": name, "date": date, "time": time,
            "party_size": party_size}  # fmt: skip


def find_booking(phone: str) -> dict[str, Any]:
    with database() as db:
        rows = db.execute(
            "SELECT reference, name, date, time, party_size FROM bookings "
            "WHERE phone = ? AND cancelled = 0 ORDER BY date, time",
            (digits(phone),),
        ).fetchall()
    keys = ("reference", "name", "date", "time", "party_size")
    return {"bookings": [dict(zip(keys, row, strict=True)) for row in rows]}


def cancel_booking(reference: str) -> dict[str, Any]:
    with database() as db:
        done = db.execute(
            "UPDATE bookings SET cancelled = 1 WHERE reference = ? AND cancelled = 0",
            (reference.strip().upper(),),
        ).rowcount
    if not done:
        return {"cancelled": False, "reason": f"no open booking with reference {reference}"}
    return {"cancelled": True, "reference": reference.strip().upper()}
