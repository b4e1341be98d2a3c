"""Finding weights: a local directory or a Hugging Face hub id, with one clear error when neither.

The tiny target and drafter ship in ``data/``; a real Qwen3 and a published drafter come from the
hub through the same functions. ``HF_HUB_OFFLINE=1`` keeps every lookup in the local cache.
"""

from __future__ import annotations

import os
from pathlib import Path


def offline() -> bool:
    """True when HF_HUB_OFFLINE asks not to touch the network (then only the local cache is used)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "false", "no", "")


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
        return Path(snapshot_download(str(name_or_path), local_files_only=offline(),
                                      allow_patterns=allow_patterns))
    except Exception as e:  # offline, unknown repo, ...
        raise not_found(str(name_or_path), default_dir) from e
