"""Build the Lambda dependency layer from platform wheels — no Docker.

    .venv/bin/python layers/build.py                 # x86_64, Python 3.12 → layers/build/layer/python
    .venv/bin/python layers/build.py --arch arm64    # for Graviton functions (set the construct's architecture too)

pip downloads manylinux wheels for the target platform and Python version (`--only-binary=:all:`,
so nothing is compiled here and a package without such a wheel fails loudly). The layer is then
byte-compiled with an interpreter of the target version (`--compile-with`, else `pythonX.Y` on
PATH, else pyenv's or uv's installed versions): /opt is read-only on Lambda, so modules not
compiled here are compiled again on every cold start. Without such an interpreter the build
fails, unless `--no-compile` says to ship source only. Prints the layer's size, unzipped and
zipped (Lambda's limit is 250 MB unzipped for a function and its layers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLATFORMS = {
    "x86_64": ["manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64"],
    "arm64": ["manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64"],
}


def candidates_for(version: str) -> list[str]:
    """`pythonX.Y` on PATH (a pyenv shim may refuse it), then pyenv's and uv's installed versions."""
    found = [exe] if (exe := shutil.which(f"python{version}")) else []
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions",
             Path(os.environ.get("UV_PYTHON_INSTALL_DIR", Path.home() / ".local" / "share" / "uv" / "python"))]
    for root in roots:
        if root.is_dir():
            found += [str(d / "bin" / f"python{version}") for d in sorted(root.iterdir(), reverse=True)
                      if d.name.startswith((version + ".", f"cpython-{version}."))]
    return found


def interpreter_for(version: str, explicit: str | None) -> str | None:
    candidates = [explicit] if explicit else candidates_for(version)
    for exe in candidates:
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return exe
    return None


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def zip_size(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "layer.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            for p in sorted(path.rglob("*")):
                if p.is_file():
                    zf.write(p, p.relative_to(path))
        return target.stat().st_size


def build(arch: str, python: str, out: Path, with_boto3: bool, compile_with: str | None,
          no_compile: bool = False) -> dict[str, int]:
    exe = None if no_compile else interpreter_for(python, compile_with)
    if exe is None and not no_compile:  # before downloading anything
        raise SystemExit(
            f"error: no Python {python} interpreter to byte-compile the layer with (pyenv install {python},"
            f" uv python install {python}, or --compile-with PATH); --no-compile ships it uncompiled"
            " (every cold start then compiles what it imports)"
        )
    site = out / "python"
    if out.exists():
        shutil.rmtree(out)
    site.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
        "--target", str(site), "--implementation", "cp", "--python-version", python,
        "--only-binary=:all:", "--upgrade", "-r", str(HERE / "requirements.txt"),
    ]
    for plat in PLATFORMS[arch]:
        cmd += ["--platform", plat]
    if with_boto3:
        cmd += ["boto3>=1.34,<2"]
    subprocess.run(cmd, check=True)
    for d in [*site.rglob("__pycache__"), site / "bin"]:  # stale bytecode, console scripts
        shutil.rmtree(d, ignore_errors=True)
    if exe:
        subprocess.run([exe, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                        str(site)], check=True)
    else:
        print(f"note: --no-compile: the layer is not byte-compiled for Python {python}", file=sys.stderr)
    return {"unzipped": dir_size(out), "zipped": zip_size(out), "compiled": int(bool(exe))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64")
    ap.add_argument("--python", default="3.12", help="the Lambda runtime's Python version")
    ap.add_argument("--out", type=Path, default=HERE / "build" / "layer")
    ap.add_argument("--with-boto3", action="store_true", help="pin boto3 into the layer")
    ap.add_argument("--compile-with", help="a Python interpreter of the target version (default: pythonX.Y)")
    ap.add_argument("--no-compile", action="store_true", help="ship the layer without bytecode")
    args = ap.parse_args(argv)
    sizes = build(args.arch, args.python, args.out, args.with_boto3, args.compile_with, args.no_compile)
    mb = 1024 * 1024
    print(f"layer {args.out} ({args.arch}, Python {args.python}{', byte-compiled' if sizes['compiled'] else ''}):"
          f" {sizes['unzipped'] / mb:.1f} MB unzipped, {sizes['zipped'] / mb:.1f} MB zipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
