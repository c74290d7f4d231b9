"""Summarise Debian's release history from distro-info-data's debian.csv.

Runs inside an agentbox guest: `make demo` passes this script as
`python3 -c` and the host's /usr/share/distro-info/debian.csv on stdin.
Columns: version,codename,series,created,release,eol[,eol-lts[,eol-elts]].
"""
import csv
import datetime
import platform
import sys

rows = list(csv.DictReader(sys.stdin))
today = datetime.date.today()


def date(s):
    return datetime.date.fromisoformat(s) if s else None


released = [r for r in rows if date(r.get("release")) and date(r["release"]) <= today]
supported = [r for r in released if not date(r.get("eol")) or date(r["eol"]) > today]
lifetimes = [
    (date(r["eol"]) - date(r["release"])).days / 365.25
    for r in released
    if date(r.get("eol")) and date(r["eol"]) <= today
]
latest = max(released, key=lambda r: date(r["release"]))

print(f"guest: {platform.system()} {platform.release()}, python {platform.python_version()}")
print(f"releases in file:   {len(rows)} ({rows[0]['codename']} .. {rows[-1]['codename']})")
print(f"released so far:    {len(released)}")
print(f"latest release:     {latest['version']} {latest['codename']} ({latest['release']})")
print(f"still supported:    {', '.join(r['codename'] for r in supported) or 'none'}")
print(f"mean support life:  {sum(lifetimes) / len(lifetimes):.2f} years over {len(lifetimes)} ended releases")
