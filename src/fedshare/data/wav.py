"""Reading WAV files without an audio backend.

`torchaudio.load` needs TorchCodec (or another backend) installed; plain RIFF/WAVE files do
not. PCM (8/16/24/32-bit), IEEE float and WAVE_FORMAT_EXTENSIBLE files are read with
`scipy.io.wavfile`, IMA ADPCM (a few UrbanSound8K clips are 4-bit) with a small decoder here;
any other encoding falls back to torchaudio's or soundfile's backend when one is installed.
A file without a RIFF/WAVE header (or with a cut-off `fmt ` chunk) is a FedshareError naming it.
"""

import struct
import warnings
from pathlib import Path

import numpy as np

from fedshare.data.files import corrupt_file
from fedshare.errors import FedshareError

REPLACE_CLIP = "replace it with the original clip from the dataset's archive"

PCM, IEEE_FLOAT, IMA_ADPCM, EXTENSIBLE = 0x0001, 0x0003, 0x0011, 0xFFFE

IMA_STEPS = (
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66,
    73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408,
    449, 494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066,
    2272, 2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630,
    9493, 10442, 11487, 12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794,
    32767,
)  # fmt: skip
IMA_INDEX_STEPS = (-1, -1, -1, -1, 2, 4, 6, 8) * 2


def riff_chunks(raw: bytes) -> dict[bytes, bytes]:
    """The top-level chunks of a RIFF/WAVE file, by id (the first of each id wins)."""
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    chunks: dict[bytes, bytes] = {}
    pos = 12
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], struct.unpack("<I", raw[pos + 4 : pos + 8])[0]
        chunks.setdefault(cid, raw[pos + 8 : pos + 8 + size])
        pos += 8 + size + (size & 1)
    return chunks


def to_float(data: np.ndarray) -> np.ndarray:
    """Integer or float samples -> float32 in [-1, 1] (scipy left-justifies 24-bit PCM)."""
    if data.dtype == np.uint8:
        return (data.astype(np.float32) - 128.0) / 128.0
    if np.issubdtype(data.dtype, np.integer):
        return (data / float(-np.iinfo(data.dtype).min)).astype(np.float32)
    return data.astype(np.float32)


def decode_ima_adpcm(
    data: bytes, channels: int, block_align: int, frames: int | None
) -> np.ndarray:
    """IMA (DVI) ADPCM as stored in WAV: per block and channel a 4-byte header (int16 sample,
    step index), then groups of 4 bytes per channel, low nibble first. Returns channels×frames
    int16."""
    out: list[list[int]] = [[] for _ in range(channels)]
    for start in range(0, len(data) - 4 * channels + 1, block_align):
        block = data[start : start + block_align]
        states = []
        for ch in range(channels):
            sample, index = struct.unpack("<hB", block[4 * ch : 4 * ch + 3])
            states.append([sample, min(max(index, 0), 88)])
            out[ch].append(sample)
        body = block[4 * channels :]
        for group in range(0, len(body) - 4 * channels + 1, 4 * channels):
            for ch in range(channels):
                state = states[ch]
                for byte in body[group + 4 * ch : group + 4 * ch + 4]:
                    for nibble in (byte & 0x0F, byte >> 4):
                        step = IMA_STEPS[state[1]]
                        diff = step >> 3
                        if nibble & 1:
                            diff += step >> 2
                        if nibble & 2:
                            diff += step >> 1
                        if nibble & 4:
                            diff += step
                        sample = state[0] - diff if nibble & 8 else state[0] + diff
                        state[0] = min(max(sample, -32768), 32767)
                        state[1] = min(max(state[1] + IMA_INDEX_STEPS[nibble], 0), 88)
                        out[ch].append(state[0])
    samples = np.array(out, dtype=np.int16).reshape(channels, -1)
    return samples if frames is None else samples[:, :frames]


def _read_with_backend(path: Path) -> tuple[np.ndarray, int]:
    """Fall back to an installed audio backend (TorchCodec via torchaudio, or soundfile)."""
    errors = []
    try:
        import torchaudio

        wave, rate = torchaudio.load(str(path))
        return wave.numpy().astype(np.float32), int(rate)
    except Exception as err:
        errors.append(f"torchaudio: {err}")
    try:
        import soundfile

        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        return np.ascontiguousarray(data.T), int(rate)
    except Exception as err:
        errors.append(f"soundfile: {err}")
    raise FedshareError(
        f"cannot decode {path} (an encoding this reader does not handle: {'; '.join(errors)}); "
        "install torchcodec or soundfile, or convert the file to PCM WAV"
    )


def check_wav_header(path: Path, raw: bytes) -> None:
    """A FedshareError naming `path` unless it starts like a WAV file (RIFF, RIFX or RF64)."""
    if not raw:
        raise corrupt_file(path, "empty file", REPLACE_CLIP)
    if raw[:4] not in (b"RIFF", b"RIFX", b"RF64") or raw[8:12] != b"WAVE":
        raise corrupt_file(path, "not a WAV file: no RIFF/WAVE header", REPLACE_CLIP)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """(channels×frames float32 samples in [-1, 1], sample rate) of a WAV file."""
    raw = Path(path).read_bytes()
    check_wav_header(Path(path), raw)
    try:
        chunks = riff_chunks(raw)
    except ValueError:  # RIFX (big-endian) or RF64: leave those to a backend
        return _read_with_backend(Path(path))
    fmt = chunks.get(b"fmt ", b"")
    if len(fmt) < 16:
        raise corrupt_file(Path(path), "no complete fmt chunk", REPLACE_CLIP)
    tag, channels, rate = struct.unpack("<HHI", fmt[:8])
    block_align = struct.unpack("<H", fmt[12:14])[0]
    if tag == IMA_ADPCM and b"data" in chunks:
        fact = chunks.get(b"fact")
        frames = struct.unpack("<I", fact[:4])[0] if fact and len(fact) >= 4 else None
        samples = decode_ima_adpcm(chunks[b"data"], channels, block_align, frames)
        return to_float(samples), rate
    if tag in (PCM, IEEE_FLOAT, EXTENSIBLE):
        from scipy.io import wavfile

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unknown chunks (LIST, cue, ...) are fine
                rate, data = wavfile.read(str(path))
        except ValueError:
            return _read_with_backend(Path(path))
        data = data.reshape(len(data), -1).T
        return np.ascontiguousarray(to_float(data)), int(rate)
    return _read_with_backend(Path(path))
