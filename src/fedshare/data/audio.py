"""Audio datasets as 2-channel log-mel spectrograms: UrbanSound8K (FLea) and FSDD.

One pipeline (FLea's Section 4.1.1 and App. C.2, after the "sound-classification" Kaggle notebook
FLea follows) turns a clip into a C×n_mels×frames tensor: resample, set the channel count (mono is
duplicated), pad or truncate to a fixed length (`sample_rate // 1000 * duration_ms` samples, as the
notebook computes it: 176,000 at 44.1 kHz and 4 s), circular time shift,
MelSpectrogram, dB with `top_db`, then frequency and time masks filled with the clip's mean.
The random parts (pad position, shift, masks) are drawn once, at load time, from a seeded
stream per clip, and can each be switched off. FLea's code applies them to the test clips
too; here that is `data.augment_test` (default off: clean test clips, the same switch and
default as CIFAR's); clips not augmented are padded at the end.
The shift rolls each channel along time (the notebook rolls the flattened tensor, which is
the same for duplicated mono and leaks between the channels of true stereo clips).
"""

import csv
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedshare.config.params import check_params
from fedshare.data.cache import Payload, cached, dataset_from_payload
from fedshare.data.dataset import Dataset
from fedshare.data.datasets import LoadRequest, register_dataset
from fedshare.data.sources import fetch_archive, find_files, missing_data_error
from fedshare.data.wav import read_wav
from fedshare.engine.rng import derive_seed
from fedshare.errors import FedshareError

STORE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class SpectrogramConfig:
    """Options of the spectrogram pipeline (`data.spectrogram.<key>`); FLea's by default."""

    sample_rate: int = 44100
    channels: int = 2
    duration_ms: int = 4000
    n_fft: int = 1024
    hop_length: int | None = None
    """None: n_fft // 2 (torchaudio's default, FLea's 512)."""
    n_mels: int = 64
    top_db: float = 80.0
    random_pad: bool = True
    """Put a short clip at a random offset inside the zero padding (else pad at the end)."""
    time_shift: float = 0.4
    """Circular shift right by up to this fraction of the length (0 = off)."""
    freq_masks: int = 2
    time_masks: int = 2
    mask_fraction: float = 0.1
    """Each mask covers up to this fraction of its axis."""
    augment_test: bool = False
    """Apply the random parts to test clips too, as FLea's code does (set by `data.augment_test`;
    `data.spectrogram.augment_test` is its older alias)."""
    seed: int = 1
    dtype: str = "float32"
    """Storage dtype: float32, or float16 to halve memory (batches are cast to float)."""

    @property
    def length(self) -> int:
        return self.sample_rate // 1000 * self.duration_ms

    @property
    def hop(self) -> int:
        return self.hop_length or self.n_fft // 2

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, n_mels, frames) of one spectrogram."""
        return self.channels, self.n_mels, 1 + self.length // self.hop


def spectrogram_config(
    base: SpectrogramConfig, overrides: Mapping[str, Any] | None, augment_test: bool = False
) -> SpectrogramConfig:
    """`base` with the user's `data.spectrogram` overrides, checked key by key, and the test-set
    switch `data.augment_test` (the older `spectrogram.augment_test` is an alias of it)."""
    params = check_params(SpectrogramConfig, dict(overrides or {}), "spectrogram", "options")
    legacy = params.get("augment_test")
    if augment_test and legacy is False:
        raise FedshareError(
            "data.augment_test=true contradicts data.spectrogram.augment_test=false; set only "
            "data.augment_test"
        )
    params["augment_test"] = bool(augment_test or legacy)
    cfg = replace(base, **params)
    if cfg.dtype not in STORE_DTYPES:
        raise FedshareError(
            f"data.spectrogram.dtype must be one of {sorted(STORE_DTYPES)}, got {cfg.dtype!r}"
        )
    return cfg


@lru_cache(maxsize=32)
def _resampler(orig: int, new: int) -> torch.nn.Module:
    import torchaudio.transforms as T

    return T.Resample(orig, new)


def fit_clip(
    wave: torch.Tensor, rate: int, cfg: SpectrogramConfig, offset_u: float | None
) -> torch.Tensor:
    """Resample, set the channel count, and pad/truncate one channels×frames clip.

    `offset_u` in [0, 1) places a short clip inside the padding (None: pad at the end)."""
    if rate != cfg.sample_rate:
        wave = _resampler(rate, cfg.sample_rate)(wave)
    if wave.shape[0] < cfg.channels:
        wave = wave.repeat(-(-cfg.channels // wave.shape[0]), 1)
    wave = wave[: cfg.channels, : cfg.length]
    gap = cfg.length - wave.shape[1]
    start = int(offset_u * (gap + 1)) if offset_u is not None else 0
    return torch.nn.functional.pad(wave, (start, gap - start))


def _masks(size: int, param: float, u: np.ndarray) -> torch.Tensor:
    """n×size boolean masks drawn as torchaudio's mask_along_axis does, from uniforms u (n×2)."""
    width = u[:, 0] * param
    start = np.floor(u[:, 1] * (size - width)).astype(np.int64)
    end = start + np.floor(width).astype(np.int64)
    pos = torch.arange(size)
    return (pos >= torch.from_numpy(start)[:, None]) & (pos < torch.from_numpy(end)[:, None])


def spectrograms(
    clips: Sequence[Callable[[], tuple[np.ndarray, int]]],
    augment: np.ndarray,
    cfg: SpectrogramConfig,
    keys: np.ndarray | None = None,
    chunk: int = 64,
) -> torch.Tensor:
    """N×C×n_mels×frames log-mel spectrograms of `clips` (each a () -> (samples, rate)).

    Clip i gets the random parts when `augment[i]`, drawn from row `keys[i]` (default i) of
    one seeded table, so a clip's draws depend only on (seed, key), not on `chunk`.
    """
    import torchaudio.transforms as T

    n, (channels, mels, frames) = len(clips), cfg.shape
    keys = np.arange(n) if keys is None else np.asarray(keys)
    n_masks = cfg.freq_masks + cfg.time_masks
    rng = np.random.default_rng(derive_seed(cfg.seed, "spectrogram"))
    draws = rng.random((int(keys.max(initial=-1)) + 1, 2 + 2 * n_masks))[keys]
    mel = T.MelSpectrogram(cfg.sample_rate, n_fft=cfg.n_fft, hop_length=cfg.hop, n_mels=mels)
    to_db = T.AmplitudeToDB("power", top_db=cfg.top_db)
    out = torch.empty((n, channels, mels, frames), dtype=STORE_DTYPES[cfg.dtype])
    for lo in range(0, n, chunk):
        idx = np.arange(lo, min(lo + chunk, n))
        aug, u = augment[idx], draws[idx]
        waves = []
        for i, a in zip(idx, aug, strict=True):
            samples, rate = clips[int(i)]()
            offset = u[i - lo, 0] if (a and cfg.random_pad) else None
            waves.append(fit_clip(torch.from_numpy(samples), rate, cfg, offset))
        x = torch.stack(waves)
        if cfg.time_shift > 0:
            shift = np.where(aug, (u[:, 1] * cfg.time_shift * cfg.length).astype(np.int64), 0)
            src = (torch.arange(cfg.length) - torch.from_numpy(shift)[:, None]) % cfg.length
            x = torch.gather(x, 2, src[:, None, :].expand_as(x))
        spec = to_db(mel(x))
        if aug.any() and n_masks:
            fill = spec.mean(dim=(1, 2, 3), keepdim=True)
            for k in range(n_masks):
                freq = k < cfg.freq_masks
                size = mels if freq else frames
                mask = _masks(size, cfg.mask_fraction * size, u[:, 2 + 2 * k : 4 + 2 * k])
                mask &= torch.from_numpy(aug)[:, None]
                mask = mask[:, None, :, None] if freq else mask[:, None, None, :]
                spec = torch.where(mask, fill, spec)
        out[lo : lo + len(idx)] = spec.to(out.dtype)
    return out


def _wav_reader(path: Path) -> Callable[[], tuple[np.ndarray, int]]:
    return lambda: read_wav(path)


def audio_payload(
    name: str,
    files: Sequence[Path],
    labels: np.ndarray,
    test: np.ndarray,
    cfg: SpectrogramConfig,
    options: Mapping[str, Any],
    request: LoadRequest,
    class_names: list[str],
) -> Payload:
    """Spectrograms of `files` split by the boolean `test` (each side in file order), through
    the cache. Training clips are processed first so both splits are views of one tensor."""

    def build() -> Payload:
        order = np.concatenate([np.flatnonzero(~test), np.flatnonzero(test)])
        augment = np.ones(len(files), dtype=bool) if cfg.augment_test else ~test
        clips = [_wav_reader(files[i]) for i in order]
        x = spectrograms(clips, augment[order], cfg, keys=order)
        y = torch.from_numpy(labels[order].astype(np.int64))
        cut = int((~test).sum())
        return {
            "x_train": x[:cut],
            "y_train": y[:cut],
            "x_test": x[cut:],
            "y_test": y[cut:],
            "class_names": class_names,
        }

    key = {"version": 1, **options, "spectrogram": asdict(cfg)}
    return cached(name, key, files, build, request.cache)


def audio_dataset(name: str, payload: Payload, num_classes: int) -> Dataset:
    return dataset_from_payload(name, payload, num_classes=num_classes, default_model="audionet")


# --------------------------------------------------------------------------- UrbanSound8K
URBANSOUND_DIR = "UrbanSound8K"
URBANSOUND_CSV = f"{URBANSOUND_DIR}/metadata/UrbanSound8K.csv"
URBANSOUND_URL = "https://zenodo.org/record/1203745/files/UrbanSound8K.tar.gz"
URBANSOUND_SPLITS = ("random", "folds")


def random_test_mask(n: int, test_fraction: float, seed: int) -> np.ndarray:
    """FLea's split: a seeded random permutation; the first round((1 − f)·n) are training."""
    num_train = round(n * (1 - test_fraction))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    test = np.ones(n, dtype=bool)
    test[perm[:num_train]] = False
    return test


@register_dataset("urbansound8k")
def load_urbansound8k(
    request: LoadRequest,
    *,
    split: str = "random",
    test_fraction: float = 0.2,
    split_seed: int = 1,
    test_folds: tuple[int, ...] = (10,),
    spectrogram: dict[str, Any] | None = None,
    augment_test: bool = False,
) -> Dataset:
    """UrbanSound8K (8,732 clips ≤ 4 s, 10 classes) from the official folder layout
    `<root>/UrbanSound8K/metadata/UrbanSound8K.csv` + `audio/fold1..fold10/*.wav`, as FLea's
    2×64×344 log-mel spectrograms (FLea's Section 4.1.1; model AudioNet).

    `split`: "random" is FLea's seeded 80/20 split (`test_fraction`, `split_seed`: 6,986 /
    1,746); "folds" puts the official `test_folds` in the test set. `spectrogram` overrides
    `SpectrogramConfig` keys; `augment_test` applies the random parts to the test clips too
    (FLea's code; default off). No normalisation (FLea feeds dB values to AudioNet).
    """
    if split not in URBANSOUND_SPLITS:
        raise FedshareError(
            f"data.split must be one of {', '.join(URBANSOUND_SPLITS)}, got {split!r}"
        )
    cfg = spectrogram_config(SpectrogramConfig(), spectrogram, augment_test)
    base = find_files(request.root, [URBANSOUND_CSV])
    if base is None:
        if not request.download:
            raise missing_data_error(
                "urbansound8k",
                request.root,
                [URBANSOUND_CSV],
                f"get UrbanSound8K.tar.gz from {URBANSOUND_URL} and extract it there",
            )
        base = fetch_archive(URBANSOUND_URL, request.root)
    with open(base / URBANSOUND_CSV, newline="") as fh:
        rows = list(csv.DictReader(fh))
    audio = base / URBANSOUND_DIR / "audio"
    files = [audio / f"fold{r['fold']}" / r["slice_file_name"] for r in rows]
    missing = [f for f in files if not f.exists()]
    if missing:
        raise FedshareError(
            f"{len(missing)} clips listed in {base / URBANSOUND_CSV} are missing, e.g. "
            f"{missing[0]}; re-extract UrbanSound8K.tar.gz"
        )
    labels = np.array([int(r["classID"]) for r in rows])
    names = {int(r["classID"]): r["class"] for r in rows}
    if split == "random":
        test = random_test_mask(len(rows), test_fraction, split_seed)
        options: dict[str, Any] = {"split": split, "f": test_fraction, "seed": split_seed}
    else:
        test = np.isin([int(r["fold"]) for r in rows], list(test_folds))
        options = {"split": split, "folds": sorted(test_folds)}
    class_names = [names.get(c, str(c)) for c in range(10)]
    payload = audio_payload("urbansound8k", files, labels, test, cfg, options, request, class_names)
    return audio_dataset("urbansound8k", payload, 10)


# --------------------------------------------------------------------------- FSDD
FSDD_DIR = "fsdd/recordings"
FSDD_URL = "https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/tags/v1.0.9.tar.gz"
FSDD_SPECTROGRAM = SpectrogramConfig(sample_rate=8000, duration_ms=1000, n_fft=512, hop_length=128)


@register_dataset("fsdd")
def load_fsdd(
    request: LoadRequest,
    *,
    test_takes: int = 5,
    spectrogram: dict[str, Any] | None = None,
    augment_test: bool = False,
) -> Dataset:
    """The Free Spoken Digit Dataset: `<root>/fsdd/recordings/{digit}_{speaker}_{index}.wav`,
    8 kHz mono, 6 speakers × 10 digits × 50 takes.

    Split by the dataset's own convention (its README): takes 0–4 of every speaker and
    digit are the test set (300 clips), takes 5–49 the training set (2,700); `test_takes`
    changes the cut. Spectrograms come from the UrbanSound8K pipeline at 8 kHz, 1 s,
    n_fft 512, hop 128: 2×64×63 (`spectrogram` overrides any key; `augment_test` as for
    UrbanSound8K).
    """
    cfg = spectrogram_config(FSDD_SPECTROGRAM, spectrogram, augment_test)
    base = find_files(request.root, [FSDD_DIR])
    if base is None:
        if not request.download:
            raise missing_data_error(
                "fsdd",
                request.root,
                [FSDD_DIR],
                "clone https://github.com/Jakobovski/free-spoken-digit-dataset and copy its "
                "recordings/ folder there",
            )
        base = _download_fsdd(request.root)
    files = sorted((base / FSDD_DIR).glob("*.wav"))
    parsed = [f.stem.split("_") for f in files]
    if not files or any(len(p) != 3 or not (p[0].isdigit() and p[2].isdigit()) for p in parsed):
        raise FedshareError(
            f"{base / FSDD_DIR} must hold {{digit}}_{{speaker}}_{{index}}.wav files "
            f"({len(files)} .wav files found)"
        )
    labels = np.array([int(p[0]) for p in parsed])
    test = np.array([int(p[2]) < test_takes for p in parsed])
    options = {"test_takes": test_takes}
    names = [str(d) for d in range(10)]
    payload = audio_payload("fsdd", files, labels, test, cfg, options, request, names)
    return audio_dataset("fsdd", payload, 10)


def _download_fsdd(root: str | None) -> Path:
    import shutil

    base = fetch_archive(FSDD_URL, root, "fsdd-download")
    unpacked = next((base / "fsdd-download").glob("*/recordings"))
    (base / FSDD_DIR).parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(unpacked), str(base / FSDD_DIR))
    return base
