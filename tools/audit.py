"""``make audit``: pip-audit over every set uv.lock installs, against the accepted findings.

1. ``uv export --frozen`` of each locked set: the base set with the dev group (``.venv``), and
   with each image extra (``gpu``, ``serve``; each its own export), and the tpu image's own
   lock (``images/tpu``: the image's set, and the TensorFlow CPU build its tests use). The cpu
   and dataflow images install the base set without dev tools, so they are covered too.
2. Each pinned version is looked up in a vulnerability database:
   - ``snapshot`` (the default, what CI runs): ``tools/advisories.json``, the PyPA Advisory
     Database's entries (OSV records, CC-BY-4.0) for every package uv.lock names, committed
     with the database's commit and date, matched here by OSV's rules (``introduced``/
     ``fixed``/``last_affected`` events on PEP 440 versions, and the listed ``versions``). It
     needs no network (this machine and CI reach only the package index, whose mirror has no
     per-version JSON API) and gives the same answer every run; it knows nothing newer than
     its date: ``--refresh-snapshot DIR`` rebuilds it from a checkout of
     https://github.com/pypa/advisory-database (docs/dependencies.md, "Dependency audit").
   - ``pypi`` or ``osv``: ``pip-audit -r ... --no-deps --disable-pip`` against PyPI's or OSV's
     live service, where it is reachable: the exports are complete, resolved sets, so nothing
     is resolved or installed.
3. Every finding must be accepted in ``tools/audit_accepted.toml`` (package, locked version,
   advisory id or alias, why); anything else fails. A package the service could not look up
   fails the audit too: pip-audit itself only skips it and reports "No known vulnerabilities",
   which would pass an audit that checked nothing (a machine whose PyPI access is a mirror
   without the JSON API, for example). Accepted entries nothing matched are listed as stale.

pip-audit (and ``packaging``, which the snapshot matching uses) come from uv.lock's ``audit``
dependency group, installed into a venv of its own by ``make audit``, which runs this script
with that venv's Python; ``--pip-audit`` names pip-audit's executable. Exit status: 0 clean
(accepted findings only), 1 findings not accepted, 2 the audit could not be done.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ACCEPTED = REPO / "tools" / "audit_accepted.toml"
SNAPSHOT = REPO / "tools" / "advisories.json"
SNAPSHOT_SOURCE = "https://github.com/pypa/advisory-database"
# The locked sets, as uv export arguments: the dev environment and each image extra, and the
# tpu image's own lock (images/tpu: the image's set, and its tests' TensorFlow CPU build).
SETS = {
    "base": [],
    "gpu": ["--extra", "gpu"],
    "serve": ["--extra", "serve"],
    "tpu": ["--project", "images/tpu"],
    "tpu-xla": [
        "--project",
        "images/tpu",
        "--no-default-groups",
        "--group",
        "xla",
        "--group",
        "test",
    ],
}


def load_accepted(path: Path) -> list[dict]:
    """The accepted findings; each entry checked for its fields.

    Raises:
        SystemExit: an entry without id, package, version or why (naming the file and entry).
    """
    entries = tomllib.loads(path.read_text()).get("accepted", [])
    for n, entry in enumerate(entries, 1):
        missing = [k for k in ("id", "package", "version", "why") if not entry.get(k)]
        if missing:
            raise SystemExit(f"{path}: accepted entry {n} has no {', '.join(missing)}")
    return entries


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def judge(report: dict, accepted: list[dict]) -> tuple[list[str], list[str], list[str], list[str]]:
    """pip-audit's JSON report against the accepted list.

    Returns:
        (skipped, not accepted, accepted, stale): packages that could not be audited, findings
        that fail the audit, findings the list accepts, and list entries that matched nothing;
        each as a line for the report.
    """
    skipped, bad, ok, used = [], [], [], set()
    for dep in report.get("dependencies", []):
        if "skip_reason" in dep:
            skipped.append(f"{dep['name']}: {dep['skip_reason']}")
            continue
        for vuln in dep.get("vulns", []):
            ids = {vuln["id"], *vuln.get("aliases", [])}
            match = [
                n
                for n, a in enumerate(accepted)
                if _norm(a["package"]) == _norm(dep["name"])
                and a["version"] == dep["version"]
                and ids & {a["id"], *a.get("aliases", [])}
            ]
            fix = ", ".join(vuln.get("fix_versions", [])) or "none"
            line = f"{dep['name']} {dep['version']}: {vuln['id']} (fixed in: {fix})"
            if match:
                used.update(match)
                ok.append(line)
            else:
                bad.append(line)
    stale = [
        f"{a['package']} {a['version']}: {a['id']}" for n, a in enumerate(accepted) if n not in used
    ]
    return skipped, bad, ok, stale


def export(work: Path, uv: str) -> list[Path]:
    """Each locked set as a requirements file (pins and markers, no hashes) under ``work``."""
    files = []
    for name, extra in SETS.items():
        path = work / f"requirements-{name}.txt"
        subprocess.run(
            [*shlex.split(uv), "export", "--frozen", "--no-emit-project", "--no-hashes"]
            + ["--format", "requirements-txt", "--no-header", "--quiet", *extra, "-o", str(path)],
            cwd=REPO,
            check=True,
        )
        files.append(path)
    return files


def pins(files: list[Path]) -> list[tuple[str, str]]:
    """The ``name==version`` lines of uv's exports, every marker included (an image's set too).

    Each distinct (name, version) once: a package two locks pin at different versions (numpy in
    uv.lock and in the tpu image's) is audited at both.
    """
    found = set()
    for path in files:
        for line in path.read_text().splitlines():
            requirement = line.split(";")[0].strip()
            if "==" in requirement and not requirement.startswith(("#", "-")):
                name, version = requirement.split("==", 1)
                found.add((_norm(name.split("[")[0]), version.strip()))
    return sorted(found)


def _affects(affected: dict, version) -> bool:
    """Whether one OSV ``affected`` entry holds ``version`` (a packaging Version)."""
    from packaging.version import InvalidVersion, Version

    def parse(text):
        try:
            return Version(text)
        except InvalidVersion:
            return None

    if any(parse(v) == version for v in affected.get("versions", [])):
        return True
    for rng in affected.get("ranges", []):
        if rng.get("type") != "ECOSYSTEM":
            continue
        # OSV: sorted events; a version is affected from an "introduced" up to the next
        # "fixed" (excluded) or "last_affected" (included).
        events = sorted(
            (parse(v) if v != "0" else Version("0"), kind)
            for event in rng.get("events", [])
            for kind, v in event.items()
            if kind in ("introduced", "fixed", "last_affected") and (v == "0" or parse(v))
        )
        inside = False
        for at, kind in events:
            if kind == "introduced" and version >= at:
                inside = True
            elif kind == "fixed" and version >= at:
                inside = False
            elif kind == "last_affected" and version > at:
                inside = False
        if inside:
            return True
    return False


def snapshot_report(locked: Iterable[tuple[str, str]], snapshot: dict) -> dict:
    """A pip-audit-shaped JSON report of ``locked`` (``pins``' pairs) against the snapshot."""
    from packaging.version import Version

    by_package: dict[str, list[dict]] = {}
    for advisory in snapshot["advisories"]:
        for affected in advisory["affected"]:
            by_package.setdefault(_norm(affected["package"]), []).append((advisory, affected))
    dependencies = []
    for name, text in sorted(locked):
        version = Version(text)
        vulns = [
            {
                "id": advisory["id"],
                "aliases": advisory.get("aliases", []),
                "fix_versions": [
                    v
                    for rng in affected.get("ranges", [])
                    if rng.get("type") == "ECOSYSTEM"
                    for event in rng.get("events", [])
                    for k, v in event.items()
                    if k == "fixed"
                ],
            }
            for advisory, affected in by_package.get(name, [])
            if advisory.get("withdrawn") is None and _affects(affected, version)
        ]
        dependencies.append({"name": name, "version": text, "vulns": vulns})
    return {"dependencies": dependencies}


def refresh_snapshot(checkout: Path, locked_names: set[str], out: Path) -> int:
    """Rebuilds the snapshot from a checkout of the PyPA Advisory Database (its ``vulns/``).

    Keeps the advisories of every package in ``locked_names`` (all of uv.lock's packages, so a
    moved pin is still judged), each trimmed to what matching and the report need.
    """
    import yaml

    commit = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%H %cI"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    advisories = []
    for path in sorted((checkout / "vulns").glob("*/*.yaml")):
        record = yaml.safe_load(path.read_text())
        affected = [
            {
                "package": a["package"]["name"],
                **({"ranges": a["ranges"]} if a.get("ranges") else {}),
                **({"versions": a["versions"]} if a.get("versions") else {}),
            }
            for a in record.get("affected", [])
            if a.get("package", {}).get("ecosystem") == "PyPI"
            and _norm(a["package"]["name"]) in locked_names
        ]
        if affected:
            advisories.append(
                {
                    "id": record["id"],
                    "aliases": record.get("aliases") or [],
                    **({"withdrawn": record["withdrawn"]} if record.get("withdrawn") else {}),
                    "affected": affected,
                }
            )
    snapshot = {
        "source": SNAPSHOT_SOURCE,
        "license": "CC-BY-4.0 (the PyPA Advisory Database's data)",
        "commit": commit[0] if commit else "unknown",
        "date": commit[1] if len(commit) > 1 else "unknown",
        "made": datetime.date.today().isoformat(),
        "packages": sorted(locked_names),
        "advisories": advisories,
    }
    out.write_text(json.dumps(snapshot, indent=0, sort_keys=True) + "\n")
    print(f"audit: {len(advisories)} advisories for {len(locked_names)} locked packages -> {out}")
    return 0


LOCKS = (REPO / "uv.lock", REPO / "images" / "tpu" / "uv.lock")


def locked_names() -> set[str]:
    """Every package the locks name (uv.lock and the tpu image's), whatever set installs it."""
    return {_norm(p["name"]) for lock in LOCKS for p in tomllib.loads(lock.read_text())["package"]}


def main(argv: list[str] | None = None) -> int:
    """Runs the audit; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pip-audit", default="pip-audit", help="pip-audit's executable")
    parser.add_argument("--work", type=Path, default=REPO / "out" / "audit")
    parser.add_argument("--accepted", type=Path, default=ACCEPTED)
    parser.add_argument(
        "--vulnerability-service",
        choices=("snapshot", "pypi", "osv"),
        default="snapshot",
        help="snapshot: the committed tools/advisories.json (offline, CI); pypi/osv: pip-audit "
        "against the live service",
    )
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument("--uv", default="python3 -m uv", help="how to run uv (for the exports)")
    parser.add_argument(
        "--refresh-snapshot",
        type=Path,
        metavar="CHECKOUT",
        help="rebuild --snapshot from this checkout of the PyPA Advisory Database, then stop",
    )
    parser.add_argument(
        "--report", type=Path, help="judge this pip-audit JSON report instead of running it"
    )
    args = parser.parse_args(argv)
    if args.refresh_snapshot:
        if not (args.refresh_snapshot / "vulns").is_dir():
            print(f"audit: error: {args.refresh_snapshot} has no vulns/ folder", file=sys.stderr)
            return 2
        return refresh_snapshot(args.refresh_snapshot, locked_names(), args.snapshot)
    accepted = load_accepted(args.accepted)
    report_path = args.report
    if report_path is None:
        args.work.mkdir(parents=True, exist_ok=True)
        report_path = args.work / f"{args.vulnerability_service}-audit.json"
        exports = export(args.work, args.uv)
        if args.vulnerability_service == "snapshot":
            snapshot = json.loads(args.snapshot.read_text())
            locked = pins(exports)
            unknown = sorted({name for name, _ in locked} - set(snapshot["packages"]))
            if unknown:
                print(
                    f"audit: error: {args.snapshot} was made before uv.lock named "
                    f"{', '.join(unknown)}; rebuild it (--refresh-snapshot, "
                    "docs/dependencies.md)",
                    file=sys.stderr,
                )
                return 2
            report_path.write_text(json.dumps(snapshot_report(locked, snapshot), indent=1))
            print(
                f"audit: {len(locked)} locked versions against the PyPA Advisory Database as of "
                f"{snapshot['date'][:10]} (commit {snapshot['commit'][:12]})"
            )
        else:
            command = [args.pip_audit, "--no-deps", "--disable-pip", "--progress-spinner", "off"]
            for path in exports:
                command += ["-r", str(path)]
            command += ["-s", args.vulnerability_service, "-f", "json", "-o", str(report_path)]
            # pip-audit exits 1 when it finds anything; the judging below decides.
            if subprocess.run(command, check=False).returncode not in (0, 1):
                print(f"audit: error: {' '.join(command)} failed", file=sys.stderr)
                return 2
    skipped, bad, ok, stale = judge(json.loads(report_path.read_text()), accepted)
    stale = [] if skipped else stale  # Nothing matched because nothing was looked up.
    for title, lines in (
        ("accepted (tools/audit_accepted.toml)", ok),
        ("stale acceptances: nothing matched them; delete them from the file", stale),
        ("NOT ACCEPTED: upgrade, or accept with why in tools/audit_accepted.toml", bad),
    ):
        if lines:
            print(f"{title}:\n  " + "\n  ".join(lines))
    if skipped:
        print(
            f"audit: error: {len(skipped)} package(s) could not be looked up in the "
            f"{args.vulnerability_service} vulnerability service, so the audit checked nothing "
            "for them (is the service reachable from here?), e.g.:\n  " + "\n  ".join(skipped[:5]),
            file=sys.stderr,
        )
        return 2
    if bad:
        return 1
    print(f"audit: {len(ok)} accepted finding(s), none other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
