#!/usr/bin/env python3
"""Assembles the release artifacts from built binaries: the packaging half of scripts/dist.

    scripts/package.py --bin-dir DIR --triple TRIPLE --wheel-platform TAG --out DIR

DIR holds what cargo built (`execbox`, `execbox-runner`, `lib_native.so`, `libexecbox_node.so`);
the version is the workspace's (`[workspace.package] version` in Cargo.toml), the one place it
is set. It writes, in --out:

- `execbox-<version>-<triple>.tar.gz` (execbox, execbox-runner, README.md, LICENSE) and its
  `.sha256`, in `sha256sum -c` form;
- `execbox-<version>-cp39-abi3-<tag>.whl`: the Python package, one wheel for every CPython from
  3.9 (abi3), its extension module the `execbox._native` PyO3 builds;
- `execbox-<version>.tgz` and `execbox-<platform>-<version>.tgz`: the npm packages, the napi-rs
  way (the first holds the JavaScript and the typings and names the second, which holds the
  addon and the runner, as an optional dependency restricted to its os, cpu and libc).

Everything it writes is reproducible: sorted entries, fixed owners and times (SOURCE_DATE_EPOCH,
else the last commit's time). Needs Python 3.11 (tomllib) and npm.
"""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# npm's names for the platforms we build, by Rust target triple (napi-rs's naming).
NPM_PLATFORMS = {
    "x86_64-unknown-linux-gnu": ("linux-x64-gnu", "linux", "x64"),
    "aarch64-unknown-linux-gnu": ("linux-arm64-gnu", "linux", "arm64"),
}


class PackagingError(Exception):
    """A packaging step that cannot go on: the message says what is missing and what to do."""


def workspace_version() -> str:
    """The one version of every artifact: `[workspace.package] version` in Cargo.toml."""
    with open(ROOT / "Cargo.toml", "rb") as f:
        manifest = tomllib.load(f)
    try:
        return manifest["workspace"]["package"]["version"]
    except KeyError:
        raise PackagingError("Cargo.toml has no [workspace.package] version: set it there") from None


def source_date_epoch() -> int:
    """The time stamped on every file: SOURCE_DATE_EPOCH, else the last commit's, else 2026-01-01."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        return int(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 1767225600


def sha256_hex(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def built(bin_dir: Path, name: str) -> Path:
    path = bin_dir / name
    if not path.is_file():
        raise PackagingError(
            f"{path} is missing: build it first (scripts/dist builds every binary it packages)"
        )
    return path


# ---- the CLI tarball --------------------------------------------------------------------------


def cli_tarball(bin_dir: Path, version: str, triple: str, out: Path, mtime: int) -> Path:
    """`execbox-<version>-<triple>.tar.gz`, one folder of that name inside, and its .sha256."""
    top = f"execbox-{version}-{triple}"
    members = [
        (built(bin_dir, "execbox"), "execbox", 0o755),
        (built(bin_dir, "execbox-runner"), "execbox-runner", 0o755),
        (ROOT / "README.md", "README.md", 0o644),
        (ROOT / "LICENSE", "LICENSE", 0o644),
    ]
    path = out / f"{top}.tar.gz"
    with open(path, "wb") as raw:
        # gzip with no name and a fixed time, so the same inputs give the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                folder = tarfile.TarInfo(top)
                folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, mtime
                tar.addfile(folder)
                for source, name, mode in members:
                    info = tarfile.TarInfo(f"{top}/{name}")
                    info.size, info.mode, info.mtime = source.stat().st_size, mode, mtime
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    with open(source, "rb") as f:
                        tar.addfile(info, f)
    (out / f"{path.name}.sha256").write_text(f"{sha256_hex(path)}  {path.name}\n")
    return path


# ---- the Python wheel -------------------------------------------------------------------------


def wheel_metadata(version: str) -> str:
    """METADATA (core metadata 2.1) from sdk/python/pyproject.toml and its README."""
    with open(ROOT / "sdk/python/pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Summary: {project['description']}",
        f"License: {project['license']['text']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    lines.append("Description-Content-Type: text/markdown")
    readme = (ROOT / "sdk/python" / project["readme"]).read_text()
    return "\n".join(lines) + "\n\n" + readme


def wheel(bin_dir: Path, version: str, platform_tag: str, out: Path, mtime: int) -> Path:
    """The abi3 wheel: python/execbox as it is, plus the extension module as _native.abi3.so."""
    tag = f"cp39-abi3-{platform_tag}"
    name = f"execbox-{version}-{tag}.whl"
    dist_info = f"execbox-{version}.dist-info"
    files: list[tuple[str, bytes, int]] = []
    package = ROOT / "sdk/python/python/execbox"
    for source in sorted(package.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            files.append((f"execbox/{source.relative_to(package).as_posix()}", source.read_bytes(), 0o644))
    files.append(("execbox/_native.abi3.so", built(bin_dir, "lib_native.so").read_bytes(), 0o755))
    tags = "".join(f"Tag: cp39-abi3-{t}\n" for t in platform_tag.split("."))
    files.append((f"{dist_info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: execbox scripts/package.py\nRoot-Is-Purelib: false\n" + tags
    ).encode(), 0o644))
    files.append((f"{dist_info}/METADATA", wheel_metadata(version).encode(), 0o644))
    files.append((f"{dist_info}/LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    files.append((f"{dist_info}/RECORD", record.getvalue().encode(), 0o644))
    stamp = zip_time(mtime)
    with zipfile.ZipFile(out / name, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data, mode in files:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return out / name


def zip_time(mtime: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(max(mtime, 315532800))  # zip cannot say anything before 1980
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


# ---- the npm packages -------------------------------------------------------------------------


def npm_packages(bin_dir: Path, version: str, triple: str, out: Path, mtime: int) -> list[Path]:
    """`execbox-<version>.tgz` and the platform package of `triple`, with `npm pack`."""
    if triple not in NPM_PLATFORMS:
        raise PackagingError(f"no npm platform package is defined for {triple}")
    platform, os_name, cpu = NPM_PLATFORMS[triple]
    node = ROOT / "sdk/node"
    with open(node / "package.json") as f:
        source = json.load(f)
    if source["version"] != version:
        raise PackagingError(
            f"sdk/node/package.json says version {source['version']}, Cargo.toml's "
            f"[workspace.package] says {version}: set both to the same version"
        )
    with tempfile.TemporaryDirectory(prefix="execbox-npm-") as work:
        main = Path(work) / "execbox"
        main.mkdir()
        # The JavaScript and the typings: package.json's `files` less the native part, which
        # goes in the platform package.
        native_files = ("execbox.node", "bin/execbox-runner")
        javascript = [name for name in source["files"] if name not in native_files]
        for name in [*javascript, "README.md"]:
            shutil.copyfile(node / name, main / name)
        shutil.copyfile(ROOT / "LICENSE", main / "LICENSE")
        manifest = {
            key: source[key]
            for key in (
                "name", "description", "license", "main", "types", "exports", "engines",
                "peerDependencies", "peerDependenciesMeta",
            )
            if key in source
        }
        manifest["version"] = version
        manifest["files"] = javascript
        manifest["optionalDependencies"] = {
            f"execbox-{name}": version for name, _, _ in NPM_PLATFORMS.values()
        }
        write_json(main / "package.json", manifest)

        native = Path(work) / f"execbox-{platform}"
        (native / "bin").mkdir(parents=True)
        addon = f"execbox.{platform}.node"
        shutil.copyfile(built(bin_dir, "libexecbox_node.so"), native / addon)
        shutil.copyfile(built(bin_dir, "execbox-runner"), native / "bin/execbox-runner")
        os.chmod(native / "bin/execbox-runner", 0o755)
        shutil.copyfile(ROOT / "LICENSE", native / "LICENSE")
        (native / "README.md").write_text(
            f"# execbox-{platform}\n\nThe native part of the npm package `execbox` for {platform}: "
            "the Node-API addon and the `execbox-runner` binary. Install `execbox`, which "
            "depends on this package where it fits.\n"
        )
        write_json(native / "package.json", {
            "name": f"execbox-{platform}",
            "version": version,
            "description": f"The native part of execbox for {platform}: the addon and the runner",
            "license": source["license"],
            "main": addon,
            "files": [addon, "bin/execbox-runner"],
            "os": [os_name],
            "cpu": [cpu],
            "libc": ["glibc"],
            "engines": source["engines"],
        })
        packed = []
        for folder in (main, native):
            for path in folder.rglob("*"):
                os.utime(path, (mtime, mtime))
            result = subprocess.run(
                ["npm", "pack", "--silent", "--pack-destination", str(out)],
                cwd=folder, capture_output=True, text=True,
            )
            if result.returncode != 0:
                raise PackagingError(
                    f"npm pack in {folder.name} failed (exit {result.returncode}):\n"
                    f"{result.stderr or result.stdout}"
                )
            packed.append(out / result.stdout.strip().splitlines()[-1])
        return packed


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", type=Path, required=True, help="the folder cargo built into")
    parser.add_argument("--triple", required=True, help="the Rust target triple built for")
    parser.add_argument("--wheel-platform", required=True,
                        help="the wheel's platform tag(s), dot-separated (manylinux_2_17_x86_64...)")
    parser.add_argument("--out", type=Path, required=True, help="the folder to fill")
    args = parser.parse_args()
    try:
        version = workspace_version()
        mtime = source_date_epoch()
        args.out = args.out.resolve()
        args.out.mkdir(parents=True, exist_ok=True)
        written = [cli_tarball(args.bin_dir, version, args.triple, args.out, mtime)]
        written.append(args.out / f"{written[0].name}.sha256")
        written.append(wheel(args.bin_dir, version, args.wheel_platform, args.out, mtime))
        written += npm_packages(args.bin_dir, version, args.triple, args.out, mtime)
    except PackagingError as e:
        print(f"scripts/package.py: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(f"{path}  {path.stat().st_size / 1048576:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
