#!/usr/bin/env python3
"""Summarise the iCalendar parts of spooled pass e-mails, as an independent
reader would see them (Python's email package and the `icalendar` library
from PyPI, not our code).

Usage: ical_summary.py FILE.eml...   → JSON list on stdout, one object per file:
  file, content_type, method, uid, sequence, tzid (of DTSTART), dtstart_utc
  and dtend_utc (the local times resolved with zoneinfo by TZID) and
  dtstart_utc_vtimezone / dtend_utc_vtimezone (resolved with the message's own
  VTIMEZONE only), vtimezone_tzids, organizer, attendees [{email, cn}],
  summary, location, rrule, status; header_names, to_name, to_addr,
  to_count, defects, mime_parts, text (the first text/plain part);
  recurrence_id_utc, instances_utc (a recurring entry expanded: RRULE from
  DTSTART in its zone, minus EXDATE, RECURRENCE-ID overrides applied).
"""
import datetime
import email
import email.policy
import json
import sys

import icalendar


def utc(dt):
    return dt.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarise(path):
    with open(path, "rb") as f:
        message = email.message_from_binary_file(f, policy=email.policy.default)
    parts = [p for p in message.walk() if p.get_content_type() == "text/calendar"]
    to = message["To"]
    texts = [p for p in message.walk() if p.get_content_type() == "text/plain"]
    out = {"file": path.rsplit("/", 1)[-1], "content_type": message.get_content_type(),
           "subject": str(message["Subject"]), "calendar_parts": len(parts),
           # What a mail reader makes of the headers: their names in order, the
           # To address and display name, and any defects the parser found.
           "header_names": list(message.keys()),
           "to_name": to.addresses[0].display_name if to is not None and len(to.addresses) == 1 else None,
           "to_addr": to.addresses[0].addr_spec if to is not None and len(to.addresses) == 1 else None,
           "to_count": len(to.addresses) if to is not None else 0,
           "defects": [type(d).__name__ for part in message.walk() for d in part.defects]
                      + [type(d).__name__ for d in (to.defects if to is not None else [])],
           "mime_parts": len(list(message.walk())),
           "text": texts[0].get_content() if texts else None}
    if not parts:
        return out
    part = parts[0]
    out["part_method_param"] = part.get_param("method")
    cal = icalendar.Calendar.from_ical(part.get_content())
    events = cal.walk("VEVENT")
    zones = cal.walk("VTIMEZONE")
    ev = events[0]
    start, end = ev["DTSTART"], ev["DTEND"]
    # lookup_tzid=False: built from the observances in the message, not
    # from the reader's own zone database.
    own = {str(z["TZID"]): z.to_tz(lookup_tzid=False) for z in zones}
    tzid = start.params.get("TZID")

    def by_vtimezone(prop):
        naive = prop.dt.replace(tzinfo=None)
        # fold=0: an ambiguous local time means its first occurrence.
        return utc(naive.replace(tzinfo=own[tzid])) if tzid in own else None

    out.update({
        "method": str(cal.get("METHOD")),
        "version": str(cal.get("VERSION")),
        "events": len(events),
        "uid": str(ev["UID"]),
        "sequence": int(ev.get("SEQUENCE", -1)),
        "tzid": tzid,
        "dtstart_utc": utc(start.dt),
        "dtend_utc": utc(end.dt),
        "dtstart_utc_vtimezone": by_vtimezone(start),
        "dtend_utc_vtimezone": by_vtimezone(end),
        "vtimezone_tzids": sorted(own),
        "organizer": str(ev.get("ORGANIZER")),
        "attendees": [{"email": str(a), "cn": a.params.get("CN")}
                      for a in (ev.get("ATTENDEE") if isinstance(ev.get("ATTENDEE"), list) else [ev.get("ATTENDEE")])
                      if a is not None],
        "summary": str(ev.get("SUMMARY")),
        "location": str(ev.get("LOCATION")),
        "description": str(ev.get("DESCRIPTION")) if ev.get("DESCRIPTION") is not None else None,
        "rrule": ev.get("RRULE").to_ical().decode() if ev.get("RRULE") is not None else None,
        "status": str(ev.get("STATUS")),
        "recurrence_id_utc": utc(ev["RECURRENCE-ID"].dt) if ev.get("RECURRENCE-ID") is not None else None,
        "instances_utc": instances(events),
    })
    return out


def instances(events):
    """Start instants of a recurring entry as a calendar program shows it:
    the master's RRULE expanded from its DTSTART in its zone (dateutil, which
    icalendar depends on), minus EXDATE, with each RECURRENCE-ID override
    moved to its own DTSTART. None when the entry does not recur."""
    masters = [e for e in events if e.get("RRULE") is not None and e.get("RECURRENCE-ID") is None]
    if not masters:
        return None
    from dateutil.rrule import rrulestr
    master = masters[0]
    start = master["DTSTART"].dt
    rule = rrulestr(master["RRULE"].to_ical().decode(), dtstart=start)
    excluded = set()
    exdates = master.get("EXDATE")
    for group in (exdates if isinstance(exdates, list) else [exdates] if exdates is not None else []):
        for d in group.dts:
            excluded.add(utc(d.dt))
    moved = {utc(e["RECURRENCE-ID"].dt): utc(e["DTSTART"].dt) for e in events if e.get("RECURRENCE-ID") is not None}
    out = []
    for when in rule:
        key = utc(when)
        if key in excluded:
            continue
        out.append(moved.get(key, key))
    return sorted(out)


if __name__ == "__main__":
    json.dump([summarise(p) for p in sys.argv[1:]], sys.stdout, indent=1, ensure_ascii=False)
