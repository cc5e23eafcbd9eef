"""Build the Lambda dependency layer from platform wheels — no Docker.

    .venv/bin/python layers/build.py                 # x86_64, Python 3.12 → layers/build/layer/python
    .venv/bin/python layers/build.py --arch arm64    # for Graviton functions (set the construct's architecture too)

pip downloads manylinux wheels for the target platform and Python version (`--only-binary=:all:`,
so nothing is compiled here and a package without such a wheel fails loudly). If an interpreter
of the target version is at hand (`--compile-with`, else `pythonX.Y` on PATH), the layer is
byte-compiled with it: /opt is read-only on Lambda, so modules not compiled here are compiled
again on every cold start. Prints the layer's size, unzipped and zipped (Lambda's limit is
250 MB unzipped for a function and its layers).
"""

from __future__ import annotations

import argparse
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


def interpreter_for(version: str, explicit: str | None) -> str | None:
    candidates = [explicit] if explicit else [f"python{version}", shutil.which(f"python{version}")]
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


def build(arch: str, python: str, out: Path, with_boto3: bool, compile_with: str | None) -> dict[str, int]:
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
    exe = interpreter_for(python, compile_with)
    if exe:
        subprocess.run([exe, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                        str(site)], check=True)
    else:
        print(f"note: no Python {python} interpreter here; the layer is not byte-compiled", file=sys.stderr)
    return {"unzipped": dir_size(out), "zipped": zip_size(out), "compiled": int(bool(exe))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64")
    ap.add_argument("--python", default="3.12", help="the Lambda runtime's Python version")
    ap.add_argument("--out", type=Path, default=HERE / "build" / "layer")
    ap.add_argument("--with-boto3", action="store_true", help="pin boto3 into the layer")
    ap.add_argument("--compile-with", help="a Python interpreter of the target version (default: pythonX.Y)")
    args = ap.parse_args(argv)
    sizes = build(args.arch, args.python, args.out, args.with_boto3, args.compile_with)
    mb = 1024 * 1024
    print(f"layer {args.out} ({args.arch}, Python {args.python}{', byte-compiled' if sizes['compiled'] else ''}):"
          f" {sizes['unzipped'] / mb:.1f} MB unzipped, {sizes['zipped'] / mb:.1f} MB zipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
