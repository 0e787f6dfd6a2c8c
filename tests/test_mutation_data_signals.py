"""Fast exact tests of the signal loaders for mutation testing (docs/mutation.md, eleventh
session): data/wav.py, data/audio.py, data/sensors.py and data/feature_files.py.

Tiny files written to tmp_path in the official layouts and tiny synthetic tensors, no
simulation: each expected value is computed here from the definition (the RIFF layout, the IMA
ADPCM decoding rules, the seeded draws replayed by hand), so a changed sign, bound, count or
flag fails a test.
"""

import datetime
import inspect
import math
import struct
import wave
import zipfile
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torchaudio.transforms as T

from fedshare.data import audio, feature_files, sensors, sources, wav
from fedshare.data.audio import SpectrogramConfig, spectrograms
from fedshare.data.datasets import MAX_CLASSES, LoadRequest
from fedshare.data.wav import IMA_INDEX_STEPS, IMA_STEPS
from fedshare.engine.rng import derive_seed
from fedshare.errors import FedshareError
from helpers import write_urbansound_metadata

# ---------------------------------------------------------------------- wav.py


def chunk(cid: bytes, body: bytes) -> bytes:
    """One RIFF chunk: id, little-endian size, body, a pad byte after an odd body."""
    return cid + struct.pack("<I", len(body)) + body + b"\0" * (len(body) % 2)


def riff(*chunks: bytes, form: bytes = b"RIFF") -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return form + struct.pack("<I", len(body)) + body


def fmt_chunk(tag: int, channels: int, rate: int, block_align: int, bits: int = 16) -> bytes:
    return chunk(b"fmt ", struct.pack("<HHIIHH", tag, channels, rate, 0, block_align, bits))


def test_riff_chunks_reads_each_chunk_by_id_the_first_of_each_id_winning():
    raw = riff(
        chunk(b"odd1", b"x"),  # size 1: a pad byte follows
        chunk(b"six6", b"abcdef"),  # size 6 (6 & 2 = 2: only the low bit pads)
        chunk(b"odd1", b"second"),
        chunk(b"odd3", b"abc"),
        chunk(b"none", b""),  # an empty chunk ending exactly at the end of the file
    )
    assert wav.riff_chunks(raw) == {
        b"odd1": b"x",
        b"six6": b"abcdef",
        b"odd3": b"abc",
        b"none": b"",
    }


def test_riff_chunks_ignores_a_tail_shorter_than_a_chunk_header():
    raw = riff(chunk(b"data", b"abcd")) + b"tail123"  # 7 bytes: no room for id and size
    assert wav.riff_chunks(raw) == {b"data": b"abcd"}
    assert wav.riff_chunks(riff()) == {}


def test_riff_chunks_refuses_what_is_not_riff_wave():
    good = riff(chunk(b"data", b"ab"))
    with pytest.raises(ValueError, match="not a RIFF/WAVE"):
        wav.riff_chunks(b"RIFX" + good[4:])
    with pytest.raises(ValueError, match="not a RIFF/WAVE"):
        wav.riff_chunks(good[:8] + b"AVI " + good[12:])
    assert wav.riff_chunks(good) == {b"data": b"ab"}


def test_to_float_maps_each_integer_type_onto_minus_one_one():
    u8 = wav.to_float(np.array([0, 128, 255, 64], dtype=np.uint8))
    assert u8.dtype == np.float32 and u8.tolist() == [-1.0, 0.0, 127 / 128, -0.5]
    i16 = wav.to_float(np.array([-32768, 0, 16384, 32767], dtype=np.int16))
    assert i16.dtype == np.float32
    assert np.array_equal(i16, np.array([-1, 0, 0.5, 32767 / 32768], dtype=np.float32))
    i32 = wav.to_float(np.array([-(2**31), 2**30], dtype=np.int32))
    assert i32.dtype == np.float32 and i32.tolist() == [-1.0, 0.5]
    f64 = wav.to_float(np.array([0.25, -2.0]))
    assert f64.dtype == np.float32 and f64.tolist() == [0.25, -2.0]


def clamp(value: int, low: int, high: int) -> int:
    return low if value < low else high if value > high else value


def ima_reference(sample: int, index: int, nibbles: list[int]) -> list[int]:
    """The IMA ADPCM decoder's definition (the IMA's 1992 recommendation): the header sample,
    then one sample per nibble."""
    out, index = [sample], clamp(index, 0, 88)
    for nib in nibbles:
        step = IMA_STEPS[index]
        magnitude = (step >> 3) + (step if nib & 4 else 0)
        magnitude += (step >> 1 if nib & 2 else 0) + (step >> 2 if nib & 1 else 0)
        sample = clamp(sample - magnitude if nib >= 8 else sample + magnitude, -32768, 32767)
        index = clamp(index + (-1, -1, -1, -1, 2, 4, 6, 8)[nib % 8], 0, 88)
        out.append(sample)
    return out


def ima_block(headers: list[tuple[int, int]], nibbles: list[list[int]]) -> bytes:
    """One WAV IMA block: per channel a 4-byte header, then per channel 4 bytes (8 nibbles,
    low nibble first) in turn."""
    out = b"".join(struct.pack("<hBB", s, i, 0) for s, i in headers)
    groups = len(nibbles[0]) // 8
    for g in range(groups):
        for channel in nibbles:
            part = channel[8 * g : 8 * g + 8]
            out += bytes(part[k] | (part[k + 1] << 4) for k in range(0, 8, 2))
    return out


def test_ima_table_of_index_steps_is_the_standards():
    assert IMA_INDEX_STEPS == (-1, -1, -1, -1, 2, 4, 6, 8) * 2
    assert len(IMA_STEPS) == 89 and IMA_STEPS[0] == 7 and IMA_STEPS[88] == 32767


def test_decode_ima_adpcm_a_hand_computed_block():
    # sample 0, index 0 (step 7); nibble 7: 7>>3 + 7 + 7>>1 + 7>>2 = 0+7+3+1 = 11, index 8 (16)
    # nibble 8 (sign only): 16>>3 = 2 subtracted -> 9, index 7 (step 14)
    # nibble 1: 14>>3 + 14>>2 = 1 + 3 = 4 -> 13, index 6 (13)
    # nibble 2: 13>>3 + 13>>1 = 1 + 6 = 7 -> 20, index 5 (12)
    # nibble 4: 12>>3 + 12 = 13 -> 33, index 7 (14); nibble 0: 14>>3 = 1 -> 34, index 6
    # nibble 15: 13>>3 + 13 + 6 + 3 = 23 subtracted -> 11, index 14 (28); nibble 0: +3 -> 14
    block = ima_block([(0, 0)], [[7, 8, 1, 2, 4, 0, 15, 0]])
    decoded = wav.decode_ima_adpcm(block, 1, len(block), None)
    assert decoded.dtype == np.int16 and decoded.shape == (1, 9)
    assert decoded[0].tolist() == [0, 11, 9, 13, 20, 33, 34, 11, 14]


def test_decode_ima_adpcm_follows_the_definition_on_every_nibble_and_clamps():
    rng = np.random.default_rng(0)
    streams = [
        (1000, 30, rng.integers(0, 16, 64).tolist()),
        (32000, 80, [7] * 24),  # runs into 32767 and step index 88
        (-32000, 86, [15] * 24),  # runs into -32768
        (5, 1, [0] * 16),  # the index falls to 0 and stays there
        (
            0,
            80,
            [7] * 4 + [8, 0, 8, 3, 9, 2, 1, 0, 8, 8, 0, 0],
        ),  # turns back from 32767 at index 88
        (-7, 200, rng.integers(0, 16, 16).tolist()),  # a header index past 88 counts as 88
    ]
    for sample, index, nibbles in streams:
        block = ima_block([(sample, index)], [nibbles])
        decoded = wav.decode_ima_adpcm(block, 1, len(block), None)
        assert decoded[0].tolist() == ima_reference(sample, index, nibbles)
    assert ima_reference(32000, 80, [7] * 24)[-1] == 32767
    assert ima_reference(-32000, 86, [15] * 24)[-1] == -32768


def test_decode_ima_adpcm_interleaves_stereo_groups_across_blocks_and_cuts_frames():
    rng = np.random.default_rng(1)
    left = [rng.integers(0, 16, 16).tolist() for _ in range(2)]
    right = [rng.integers(0, 16, 16).tolist() for _ in range(2)]
    heads = [[(100, 10), (-200, 20)], [(300, 0), (-400, 88)]]
    data = b"".join(ima_block(h, [a, b]) for h, a, b in zip(heads, left, right, strict=True))
    align = len(data) // 2
    expected = [
        ima_reference(*heads[0][0], left[0]) + ima_reference(*heads[1][0], left[1]),
        ima_reference(*heads[0][1], right[0]) + ima_reference(*heads[1][1], right[1]),
    ]
    decoded = wav.decode_ima_adpcm(data, 2, align, None)
    assert decoded.shape == (2, 34) and decoded.tolist() == expected
    cut = wav.decode_ima_adpcm(data, 2, align, 20)
    assert cut.tolist() == [row[:20] for row in expected]


def test_decode_ima_adpcm_reads_partial_tails_only_up_to_whole_headers_and_groups():
    nibbles = list(range(16))
    block = ima_block([(50, 40)], [nibbles])  # 4 + 8 bytes
    full = ima_reference(50, 40, nibbles)
    # a last block of a header and one whole group, then a group cut short
    assert wav.decode_ima_adpcm(block, 1, 64, None)[0].tolist() == full
    assert wav.decode_ima_adpcm(block + b"\x11\x22\x33", 1, 64, None)[0].tolist() == full
    assert wav.decode_ima_adpcm(block[:11], 1, 64, None)[0].tolist() == full[:9]
    # a block of its header alone gives its sample; a cut header gives nothing
    tail = struct.pack("<hBB", -123, 5, 0)
    two = wav.decode_ima_adpcm(block + tail, 1, len(block), None)[0].tolist()
    assert two == [*full, -123]
    assert wav.decode_ima_adpcm(block + tail[:3], 1, len(block), None)[0].tolist() == full
    stereo = ima_block([(1, 2), (3, 4)], [[5] * 8, [6] * 8])  # 8 + 8 bytes
    assert wav.decode_ima_adpcm(stereo[:7], 2, 16, None).shape == (2, 0)
    assert wav.decode_ima_adpcm(stereo[:15], 2, 16, None).tolist() == [[1], [3]]
    assert wav.decode_ima_adpcm(stereo, 2, 16, None).tolist() == [
        ima_reference(1, 2, [5] * 8),
        ima_reference(3, 4, [6] * 8),
    ]


def test_check_wav_header_names_an_empty_file_and_a_missing_header(tmp_path: Path):
    path = tmp_path / "a.wav"
    with pytest.raises(FedshareError, match=r"a\.wav is corrupt \(empty file\); replace it"):
        wav.check_wav_header(path, b"")
    for bad in (b"RIFZ\0\0\0\0WAVE", b"RIFF\0\0\0\0WAVF", b"WAVE"):
        with pytest.raises(FedshareError, match="no RIFF/WAVE header"):
            wav.check_wav_header(path, bad)
    for form in (b"RIFF", b"RIFX", b"RF64"):
        wav.check_wav_header(path, form + b"\0\0\0\0WAVE")


def write_pcm16(path: Path, frames: np.ndarray, rate: int) -> None:
    """frames×channels int16 through the standard library's wave module."""
    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(frames.shape[1])
        fh.setsampwidth(2)
        fh.setframerate(rate)
        fh.writeframes(frames.astype("<i2").tobytes())


def test_read_wav_reads_pcm_as_channels_by_frames(tmp_path: Path):
    frames = np.array([[0, -32768], [16384, 8192], [-16384, 32767]], dtype=np.int16)
    write_pcm16(tmp_path / "s.wav", frames, 12345)
    samples, rate = wav.read_wav(tmp_path / "s.wav")
    assert rate == 12345 and type(rate) is int
    assert samples.dtype == np.float32 and samples.flags.c_contiguous
    assert samples.tolist() == (frames.T / 32768).tolist()
    write_pcm16(tmp_path / "m.wav", frames[:, :1], 8000)
    mono, _ = wav.read_wav(tmp_path / "m.wav")
    assert mono.shape == (1, 3) and mono[0].tolist() == [0.0, 0.5, -0.5]


def test_read_wav_decodes_ima_adpcm_cut_to_the_fact_chunks_frames(tmp_path: Path):
    nibbles = list(range(16))
    block = ima_block([(-500, 12)], [nibbles])
    expected = np.array(ima_reference(-500, 12, nibbles)) / 32768
    path = tmp_path / "ima.wav"
    fmt = fmt_chunk(wav.IMA_ADPCM, 1, 7000, len(block), bits=4)
    path.write_bytes(riff(fmt, chunk(b"fact", struct.pack("<I", 10)), chunk(b"data", block)))
    samples, rate = wav.read_wav(path)
    assert rate == 7000 and samples.dtype == np.float32
    assert np.array_equal(samples[0], expected[:10].astype(np.float32))
    path.write_bytes(riff(fmt, chunk(b"fact", struct.pack("<IH", 7, 9)), chunk(b"data", block)))
    assert np.array_equal(wav.read_wav(path)[0][0], expected[:7].astype(np.float32))
    for fact in (b"", b"\x05\0\0"):  # no fact chunk, or one too short: every frame decoded
        extra = (chunk(b"fact", fact),) if fact else ()
        path.write_bytes(riff(fmt, *extra, chunk(b"data", block)))
        assert np.array_equal(wav.read_wav(path)[0][0], expected.astype(np.float32))


def test_read_wav_hands_other_files_to_an_audio_backend(tmp_path: Path, monkeypatch):
    seen: list[Path] = []

    def backend(path: Path) -> tuple[np.ndarray, int]:
        seen.append(path)
        return np.zeros((1, 1), np.float32), 1

    monkeypatch.setattr(wav, "_read_with_backend", backend)
    path = tmp_path / "x.wav"
    data = chunk(b"data", b"\0" * 8)
    cases = {
        "rifx": b"RIFX" + riff(fmt_chunk(1, 1, 8000, 2), data)[4:],
        "mp3": riff(fmt_chunk(0x55, 1, 8000, 2), data),
        "ima without data": riff(fmt_chunk(wav.IMA_ADPCM, 1, 8000, 256)),
        "pcm scipy refuses": riff(fmt_chunk(1, 1, 8000, 2, bits=12), data),
    }
    for name, raw in cases.items():
        path.write_bytes(raw)
        seen.clear()
        assert wav.read_wav(path)[1] == 1, name
        assert seen == [path], name


def test_read_wav_refuses_a_missing_or_cut_fmt_chunk(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(wav, "_read_with_backend", lambda path: pytest.fail("no backend"))
    path = tmp_path / "cut.wav"
    full = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    for fmt in (b"", full[:15]):
        path.write_bytes(riff(chunk(b"fmt ", fmt), chunk(b"data", b"\0\0")))
        with pytest.raises(FedshareError, match=r"cut\.wav is corrupt \(no complete fmt chunk\)"):
            wav.read_wav(path)
    path.write_bytes(riff(chunk(b"fmt ", full), chunk(b"data", b"\0\0")))
    assert wav.read_wav(path)[0].tolist() == [[0.0]]
    path.write_bytes(b"")
    with pytest.raises(FedshareError, match="empty file"):
        wav.read_wav(path)


class SoundfileStandIn:
    """soundfile's `read` on a mono file: frames×1 with `always_2d`, else a flat array."""

    def __init__(self):
        self.calls: list[tuple] = []

    def read(self, path: str, dtype: str, always_2d: bool = False):
        self.calls.append((path, dtype))
        data = np.arange(4, dtype=np.float32)
        return (data[:, None] if always_2d else data), 11


def test_the_backend_fallback_names_the_file_and_each_backends_error(tmp_path: Path, monkeypatch):
    import sys

    import torch
    import torchaudio

    monkeypatch.setitem(sys.modules, "soundfile", None)  # not installed
    monkeypatch.setattr(torchaudio, "load", lambda path: (torch.ones(2, 3, dtype=torch.float64), 9))
    samples, rate = wav._read_with_backend(tmp_path / "a.wav")
    assert samples.dtype == np.float32 and samples.shape == (2, 3) and rate == 9

    def refuse(path: str):
        raise RuntimeError("no codec")

    monkeypatch.setattr(torchaudio, "load", refuse)
    soundfile = SoundfileStandIn()
    monkeypatch.setitem(sys.modules, "soundfile", soundfile)
    samples, rate = wav._read_with_backend(tmp_path / "mono.wav")
    assert soundfile.calls == [(str(tmp_path / "mono.wav"), "float32")]
    assert samples.shape == (1, 4) and samples.flags.c_contiguous and rate == 11
    assert samples.tolist() == [[0.0, 1.0, 2.0, 3.0]]
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with pytest.raises(FedshareError) as err:
        wav._read_with_backend(tmp_path / "a.wav")
    message = str(err.value)
    assert message.startswith(f"cannot decode {tmp_path / 'a.wav'} (")
    assert "torchaudio: no codec; soundfile: " in message and "install torchcodec" in message


# ---------------------------------------------------------------------- audio.py

TINY = {"sample_rate": 1000, "duration_ms": 64, "n_fft": 32, "hop_length": 8, "n_mels": 6}
"""64 samples a clip, 9 frames of 6 mel bands: milliseconds per spectrogram."""


def tiny_config(**changes) -> SpectrogramConfig:
    return replace(SpectrogramConfig(**TINY), **changes)


def test_the_configs_length_hop_and_shape():
    flea = SpectrogramConfig()
    assert flea.length == 176000 and flea.hop == 512 and flea.shape == (2, 64, 344)
    fsdd = audio.FSDD_SPECTROGRAM
    assert fsdd.length == 8000 and fsdd.hop == 128 and fsdd.shape == (2, 64, 63)
    odd = SpectrogramConfig(sample_rate=1500, duration_ms=10, n_fft=6, channels=3, n_mels=5)
    assert odd.length == 10 and odd.hop == 3 and odd.shape == (3, 5, 4)  # 1500 // 1000 = 1
    assert SpectrogramConfig(sample_rate=2999, duration_ms=10).length == 20  # 2999 // 1000 = 2


def test_spectrogram_config_checks_each_override_and_the_test_switch():
    base = tiny_config()
    assert audio.spectrogram_config(base, None) == base
    assert audio.spectrogram_config(base, {"n_mels": 3}) == replace(base, n_mels=3)
    for switch, legacy, expected in [
        (False, None, False),
        (True, None, True),
        (False, True, True),
        (True, True, True),
        (False, False, False),
    ]:
        overrides = {} if legacy is None else {"augment_test": legacy}
        cfg = audio.spectrogram_config(base, overrides, switch)
        assert cfg.augment_test is expected, (switch, legacy)
    with pytest.raises(FedshareError, match="contradicts"):
        audio.spectrogram_config(base, {"augment_test": False}, True)
    with pytest.raises(FedshareError, match="n_melz"):
        audio.spectrogram_config(base, {"n_melz": 3})
    half = audio.spectrogram_config(base, {"dtype": "float16"})
    assert half.dtype == "float16"
    with pytest.raises(FedshareError, match=r"must be one of \['float16', 'float32'\], got 'int8'"):
        audio.spectrogram_config(base, {"dtype": "int8"})


def test_fit_clip_sets_channels_and_pads_or_truncates():
    cfg = tiny_config()
    mono = torch.arange(1.0, 11.0)[None]  # 1×10
    end = audio.fit_clip(mono, 1000, cfg, None)
    assert end.shape == (2, 64) and torch.equal(end[0], end[1])
    assert torch.equal(end[0, :10], mono[0]) and not end[0, 10:].any()
    for u, start in [(0.0, 0), (0.5, 27), (0.99, 54)]:  # int(u · (54 + 1))
        placed = audio.fit_clip(mono, 1000, cfg, u)
        expected = torch.zeros(2, 64)
        expected[:, start : start + 10] = mono
        assert torch.equal(placed, expected), u
    long = torch.arange(300.0).reshape(3, 100)
    assert torch.equal(audio.fit_clip(long, 1000, cfg, 0.7), long[:2, :64])
    three = audio.fit_clip(long[:2, :64], 1000, replace(cfg, channels=3), None)
    assert torch.equal(three, long[[0, 1, 0], :64])  # stereo repeated to 4, cut to 3


def test_fit_clip_resamples_to_the_configs_rate():
    cfg = tiny_config()
    clip = torch.sin(torch.arange(80.0) / 3)[None]
    fitted = audio.fit_clip(clip, 2000, cfg, None)
    expected = T.Resample(2000, 1000)(clip)
    assert expected.shape == (1, 40)
    assert torch.equal(fitted[0, :40], expected[0]) and not fitted[:, 40:].any()


def test_masks_cover_floor_width_from_a_floored_start():
    u = np.array([[0.5, 0.5], [0.99, 0.0], [0.3, 0.999], [0.0, 0.5], [0.74, 0.3]])
    masks = audio._masks(10, 4.0, u)
    for row, (a, b) in zip(masks.tolist(), u, strict=True):
        width = a * 4.0
        start = math.floor(b * (10 - width))
        assert row == [start <= p < start + math.floor(width) for p in range(10)], (a, b)
    assert masks[0].tolist() == [p in (4, 5) for p in range(10)]
    assert masks[1].tolist() == [p in (0, 1, 2) for p in range(10)]


def reference_spectrograms(clips, augment, cfg, keys) -> torch.Tensor:
    """FLea's pipeline clip by clip, from the seeded table of draws (one row per key)."""
    n_masks = cfg.freq_masks + cfg.time_masks
    rng = np.random.default_rng(derive_seed(cfg.seed, "spectrogram"))
    table = rng.random((max(keys) + 1, 2 + 2 * n_masks))
    mel = T.MelSpectrogram(cfg.sample_rate, n_fft=cfg.n_fft, hop_length=cfg.hop, n_mels=cfg.n_mels)
    to_db = T.AmplitudeToDB("power", top_db=cfg.top_db)
    out = []
    for clip, aug, key in zip(clips, augment, keys, strict=True):
        samples, rate = clip()
        u = table[key]
        x = audio.fit_clip(
            torch.from_numpy(samples), rate, cfg, u[0] if aug and cfg.random_pad else None
        )
        if aug:
            x = torch.roll(x, int(u[1] * cfg.time_shift * cfg.length), dims=1)
        spec = to_db(mel(x))
        if aug:
            fill = spec.mean()
            for k in range(n_masks):
                size = cfg.n_mels if k < cfg.freq_masks else spec.shape[2]
                width = u[2 + 2 * k] * cfg.mask_fraction * size
                start = math.floor(u[3 + 2 * k] * (size - width))
                stop = start + math.floor(width)
                if k < cfg.freq_masks:
                    spec[:, start:stop, :] = fill
                else:
                    spec[:, :, start:stop] = fill
        out.append(spec)
    return torch.stack(out)


def noise_clip(n: int, channels: int = 1, rate: int = 1000):
    samples = np.random.default_rng(n).normal(0, 0.3, (channels, n)).astype(np.float32)
    return lambda: (samples, rate)


CLIPS = [noise_clip(20), noise_clip(64, 2), noise_clip(100), noise_clip(37), noise_clip(5, 2)]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"mask_fraction": 0.5, "time_shift": 0.9, "seed": 7},
        {"random_pad": False},
        {"time_shift": 0.0},
        {"freq_masks": 1, "time_masks": 3, "mask_fraction": 0.6},
        {"freq_masks": 0, "time_masks": 0},
    ],
)
def test_spectrograms_are_the_pipeline_clip_by_clip(changes):
    cfg = tiny_config(**changes)
    augment = np.array([True, False, True, True, False])
    keys = [4, 0, 7, 2, 3]
    expected = reference_spectrograms(CLIPS, augment, cfg, keys)
    got = spectrograms(CLIPS, augment, cfg, keys=np.array(keys), chunk=2)
    assert got.shape == (5, 2, 6, 9) and got.dtype == torch.float32
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    default_keys = spectrograms(CLIPS, augment, cfg, chunk=3)
    assert torch.allclose(
        default_keys, reference_spectrograms(CLIPS, augment, cfg, range(5)), atol=1e-5, rtol=0
    )


def test_a_time_shift_of_zero_or_less_shifts_nothing():
    augment = np.array([True, False, True, True, False])
    off = spectrograms(CLIPS, augment, tiny_config(time_shift=0.0))
    assert torch.equal(spectrograms(CLIPS, augment, tiny_config(time_shift=-0.3)), off)
    assert not torch.equal(spectrograms(CLIPS, augment, tiny_config(time_shift=0.3)), off)


def test_spectrograms_store_float16_and_take_no_clips():
    cfg = tiny_config(dtype="float16")
    augment = np.array([True, True, False, True, False])
    half = spectrograms(CLIPS, augment, cfg, chunk=64)
    full = spectrograms(CLIPS, augment, replace(cfg, dtype="float32"))
    assert half.dtype == torch.float16 and torch.equal(half, full.half())
    assert spectrograms([], np.zeros(0, bool), cfg).shape == (0, 2, 6, 9)


def test_random_test_mask_keeps_the_first_round_of_one_minus_f_of_a_seeded_permutation():
    for n, f, seed, train in [(10, 0.25, 3, 8), (10, 0.35, 1, 6), (7, 0.0, 2, 7), (5, 1.0, 2, 0)]:
        mask = audio.random_test_mask(n, f, seed)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
        assert mask.dtype == bool and int((~mask).sum()) == train, (n, f)
        assert mask.tolist() == [i not in perm[:train] for i in range(n)]


def write_clip(path: Path, samples: int, rate: int = 1000, seed: int = 0) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = np.random.default_rng(seed).integers(-20000, 20000, (samples, 1))
    write_pcm16(path, frames, rate)
    return frames[:, 0] / 32768


def file_spectrogram(path: Path, cfg: SpectrogramConfig, key: int, aug: bool) -> torch.Tensor:
    """One file's spectrogram as `spectrograms` makes it for the clip with this key."""
    return spectrograms([lambda: wav.read_wav(path)], np.array([aug]), cfg, keys=np.array([key]))[0]


class CacheSpy:
    """Stands in for `cached`: builds, and keeps what the loader asked for."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __call__(self, name, key, sources, build, enabled=True):
        self.calls.append((name, key, list(sources), enabled))
        return build()


def write_urbansound(root: Path, folds: list[int], classes: list[int]) -> list[Path]:
    rows, files = [], []
    for k, (fold, cls) in enumerate(zip(folds, classes, strict=True)):
        name = f"{100 + k}-{cls}-0-0.wav"
        path = root / "UrbanSound8K" / "audio" / f"fold{fold}" / name
        write_clip(path, 30 + 7 * k, seed=k)
        files.append(path)
        rows.append({"slice_file_name": name, "fold": fold, "classID": cls, "class": f"c{cls}"})
    write_urbansound_metadata(root, rows)
    return files


def check_split(data, files, labels, test, cfg, augment_test=False):
    order = [i for i in range(len(files)) if not test[i]] + [
        i for i in range(len(files)) if test[i]
    ]
    cut = int((~test).sum())
    assert data.y_train.tolist() == [labels[i] for i in order[:cut]]
    assert data.y_test.tolist() == [labels[i] for i in order[cut:]]
    assert data.y_train.dtype == torch.int64
    for j, i in enumerate(order):
        x = data.x_train[j] if j < cut else data.x_test[j - cut]
        expected = file_spectrogram(files[i], cfg, i, j < cut or augment_test)
        assert torch.equal(x, expected), i


def test_urbansound8k_random_split_in_file_order_through_the_cache(tmp_path: Path, monkeypatch):
    spy = CacheSpy()
    monkeypatch.setattr(audio, "cached", spy)
    folds, classes = [1, 2, 3, 1, 2, 10, 4, 5], [3, 0, 3, 9, 1, 1, 3, 0]
    files = write_urbansound(tmp_path, folds, classes)
    request = LoadRequest(root=str(tmp_path), cache=False)
    data = audio.load_urbansound8k(request, spectrogram=TINY, test_fraction=0.3, split_seed=4)
    cfg = tiny_config()
    test = audio.random_test_mask(8, 0.3, 4)
    check_split(data, files, classes, test, cfg)
    assert data.num_classes == 10 and data.default_model == "audionet"
    assert data.class_names == ["c0", "c1", "2", "c3", "4", "5", "6", "7", "8", "c9"]
    name, key, sources, enabled = spy.calls[0]
    assert name == "urbansound8k" and sources == files and enabled is False
    assert key == {"version": 1, "split": "random", "f": 0.3, "seed": 4, "spectrogram": asdict(cfg)}
    default = audio.load_urbansound8k(request, spectrogram=TINY)
    assert spy.calls[1][1] | {"spectrogram": None} == {
        "version": 1,
        "split": "random",
        "f": 0.2,
        "seed": 1,
        "spectrogram": None,
    }
    check_split(default, files, classes, audio.random_test_mask(8, 0.2, 1), cfg)


def test_urbansound8k_fold_split_and_augmented_test_clips(tmp_path: Path, monkeypatch):
    spy = CacheSpy()
    monkeypatch.setattr(audio, "cached", spy)
    folds, classes = [1, 9, 3, 10, 2, 9], [5, 6, 7, 8, 2, 2]
    files = write_urbansound(tmp_path, folds, classes)
    request = LoadRequest(root=str(tmp_path))
    data = audio.load_urbansound8k(
        request, split="folds", test_folds=(10, 9), spectrogram=TINY, augment_test=True
    )
    test = np.array([f in (9, 10) for f in folds])
    check_split(data, files, classes, test, tiny_config(augment_test=True), augment_test=True)
    assert spy.calls[0][1]["folds"] == [9, 10] and spy.calls[0][1]["split"] == "folds"
    assert spy.calls[0][3] is True
    clean = audio.load_urbansound8k(request, split="folds", spectrogram=TINY)
    check_split(clean, files, classes, np.array([f == 10 for f in folds]), tiny_config())


def test_urbansound8k_refuses_a_bad_split_and_missing_clips(tmp_path: Path, monkeypatch):
    request = LoadRequest(root=str(tmp_path))
    with pytest.raises(
        FedshareError, match=r"data\.split must be one of random, folds, got 'fold'"
    ):
        audio.load_urbansound8k(request, split="fold")
    with pytest.raises(FedshareError, match="dataset 'urbansound8k' not found"):
        audio.load_urbansound8k(request)
    files = write_urbansound(tmp_path, [1, 2, 3], [0, 1, 2])
    files[1].unlink()
    files[2].unlink()
    with pytest.raises(FedshareError, match=f"2 clips listed in .* are missing, e.g. {files[1]}"):
        audio.load_urbansound8k(request)


def test_urbansound8k_downloads_only_when_asked(tmp_path: Path, monkeypatch):
    fetched = []

    def fetch(url, root):
        fetched.append((url, root))
        write_urbansound(tmp_path / "got", [1, 10], [4, 5])
        return tmp_path / "got"

    monkeypatch.setattr(audio, "fetch_archive", fetch)
    (tmp_path / "mine").mkdir()
    request = LoadRequest(root=str(tmp_path / "mine"), download=True, cache=False)
    data = audio.load_urbansound8k(request, split="folds", spectrogram=TINY)
    assert fetched == [(audio.URBANSOUND_URL, str(tmp_path / "mine"))]
    assert data.y_train.tolist() == [4] and data.y_test.tolist() == [5]


def test_fsdds_download_moves_the_archives_recordings_into_place(tmp_path: Path, monkeypatch):
    calls = []

    def fetch(url, root, extract_to):
        calls.append((url, root, extract_to))
        touch(tmp_path / extract_to / "free-spoken-digit-dataset-1.0.9/recordings/0_a_1.wav")
        return tmp_path

    monkeypatch.setattr(audio, "fetch_archive", fetch)
    (tmp_path / "fsdd").mkdir()  # a folder already there is kept
    assert audio._download_fsdd("somewhere") == tmp_path
    assert calls == [(audio.FSDD_URL, "somewhere", "fsdd-download")]
    assert (tmp_path / "fsdd/recordings/0_a_1.wav").is_file()
    assert not list((tmp_path / "fsdd-download").glob("*/recordings"))


def write_fsdd(root: Path, names: list[str]) -> None:
    folder = root / "fsdd" / "recordings"
    folder.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(names):
        write_clip(folder / name, 20 + 3 * k, seed=k)


def test_fsdd_splits_by_take_with_digits_as_labels(tmp_path: Path, monkeypatch):
    spy = CacheSpy()
    monkeypatch.setattr(audio, "cached", spy)
    names = [
        "3_theo_4.wav",
        "7_jackson_12.wav",
        "0_nicolas_0.wav",
        "9_theo_5.wav",
        "1_yweweler_3.wav",
    ]
    write_fsdd(tmp_path, names)
    files = sorted((tmp_path / "fsdd" / "recordings").glob("*.wav"))
    labels = [int(f.name[0]) for f in files]
    request = LoadRequest(root=str(tmp_path), cache=False)
    data = audio.load_fsdd(request, spectrogram=TINY)
    takes = [int(f.stem.split("_")[2]) for f in files]
    cfg = replace(audio.FSDD_SPECTROGRAM, **TINY)
    check_split(data, files, labels, np.array([t < 5 for t in takes]), cfg)
    assert data.num_classes == 10 and data.default_model == "audionet"
    assert data.class_names == [str(d) for d in range(10)]
    assert spy.calls[0][0] == "fsdd" and spy.calls[0][2] == files
    assert spy.calls[0][1] == {"version": 1, "test_takes": 5, "spectrogram": asdict(cfg)}
    four = audio.load_fsdd(request, test_takes=4, spectrogram=TINY, augment_test=True)
    check_split(
        four, files, labels, np.array([t < 4 for t in takes]), replace(cfg, augment_test=True), True
    )
    assert spy.calls[1][1]["test_takes"] == 4


def test_the_loaders_take_their_options_by_keyword_only():
    loaders = (audio.load_urbansound8k, audio.load_fsdd, sensors.load_uci_har)
    for loader in (*loaders, feature_files.load_features_file):
        kinds = [p.kind for p in inspect.signature(loader).parameters.values()]
        assert kinds[0] == inspect.Parameter.POSITIONAL_OR_KEYWORD, loader.__name__
        assert set(kinds[1:]) == {inspect.Parameter.KEYWORD_ONLY}, loader.__name__


def test_fsdd_defaults_to_its_own_spectrogram(tmp_path: Path, monkeypatch):
    seen = []
    monkeypatch.setattr(audio, "audio_payload", lambda *args: seen.append(args[4]) or {})
    monkeypatch.setattr(audio, "audio_dataset", lambda name, payload, classes: None)
    write_fsdd(tmp_path, ["3_theo_4.wav"])
    audio.load_fsdd(LoadRequest(root=str(tmp_path)))
    assert seen == [audio.FSDD_SPECTROGRAM]


@pytest.mark.parametrize(
    "bad", ["3_theo.wav", "3_theo_1_2.wav", "x_theo_1.wav", "3_theo_x.wav", None]
)
def test_fsdd_refuses_names_off_the_convention(tmp_path: Path, bad):
    names = ["3_theo_4.wav"] + ([bad] if bad else [])
    if bad is None:
        (tmp_path / "fsdd" / "recordings").mkdir(parents=True)
        names = []
    write_fsdd(tmp_path, names)
    with pytest.raises(
        FedshareError, match=r"must hold \{digit\}_\{speaker\}_\{index\}\.wav files"
    ):
        audio.load_fsdd(LoadRequest(root=str(tmp_path), cache=False), spectrogram=TINY)


def test_fsdd_missing_and_downloaded(tmp_path: Path, monkeypatch):
    (tmp_path / "mine").mkdir()
    request = LoadRequest(root=str(tmp_path / "mine"), cache=False)
    with pytest.raises(FedshareError, match="dataset 'fsdd' not found"):
        audio.load_fsdd(request)

    def download(root):
        write_fsdd(tmp_path / "got", ["5_a_9.wav", "6_b_1.wav"])
        return tmp_path / "got"

    monkeypatch.setattr(audio, "_download_fsdd", download)
    data = audio.load_fsdd(replace(request, download=True), spectrogram=TINY)
    assert data.y_train.tolist() == [5] and data.y_test.tolist() == [6]


# ---------------------------------------------------------------------- sensors.py


def test_read_matrix_reads_equal_rows_and_skips_blank_lines(tmp_path: Path):
    path = tmp_path / "m.txt"
    path.write_text("\n 1 2.5 -3\n\n4e-1 5 6\n   \n")
    got = sensors.read_matrix(path)
    assert got.dtype == np.float32 and got.shape == (2, 3)
    assert np.array_equal(got, np.array([[1, 2.5, -3], [0.4, 5, 6]], dtype=np.float32))
    path.write_text("7 8 9")
    assert sensors.read_matrix(path).tolist() == [[7, 8, 9]]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1 2\n3\n", "3 values on 2 lines do not form equal rows"),
        ("1\n2 3 4\n", "4 values on 2 lines do not form equal rows"),
        ("1 2 3\n4\n5 6\n", "6 values on 3 lines do not form equal rows"),
        ("", "0 values on 0 lines do not form equal rows"),
        ("\n \n", "0 values on 0 lines do not form equal rows"),
        ("1 x\n", "a value is not a number"),
    ],
)
def test_read_matrix_names_a_file_that_is_no_full_matrix(tmp_path: Path, text, problem):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(FedshareError, match=rf"bad\.txt is corrupt \({problem}"):
        sensors.read_matrix(path)


def test_existing_text_file_prefers_the_plain_file_then_its_gz_twin(tmp_path: Path):
    plain, gz = tmp_path / "a.txt", tmp_path / "a.txt.gz"
    assert sensors.existing_text_file(plain) is None
    gz.write_bytes(b"")
    assert sensors.existing_text_file(plain) == gz
    plain.write_text("")
    assert sensors.existing_text_file(plain) == plain
    (tmp_path / "d.txt").mkdir()
    assert sensors.existing_text_file(tmp_path / "d.txt") is None


def test_split_files_are_the_labels_then_each_channel():
    assert sensors._split_files("test", ("body_gyro_y", "total_acc_x")) == [
        "UCI HAR Dataset/test/y_test.txt",
        "UCI HAR Dataset/test/Inertial Signals/body_gyro_y_test.txt",
        "UCI HAR Dataset/test/Inertial Signals/total_acc_x_test.txt",
    ]


def touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_find_uci_har_takes_the_first_root_holding_every_file(tmp_path: Path, monkeypatch):
    relative = ["UCI HAR Dataset/a.txt", "UCI HAR Dataset/b.txt"]
    env, default = tmp_path / "env", tmp_path / "default"
    monkeypatch.setenv(sources.DATA_ENV, str(env))
    monkeypatch.setattr(sources, "DEFAULT_ROOT", default)
    assert sensors.find_uci_har(None, relative) is None
    touch(default / relative[0])
    gz = touch(default / (relative[1] + ".gz"))
    assert sensors.find_uci_har(None, relative) == (default, [default / relative[0], gz])
    touch(env / "uci_har_hapt" / relative[0])
    assert sensors.find_uci_har(None, relative)[0] == default  # env's copy lacks b.txt
    touch(env / "uci_har_hapt" / relative[1])
    hapt = env / "uci_har_hapt"
    assert sensors.find_uci_har(None, relative) == (hapt, [hapt / r for r in relative])
    touch(env / relative[0])
    touch(env / relative[1])
    assert sensors.find_uci_har(None, relative) == (env, [env / r for r in relative])
    assert sensors.find_uci_har(str(default), relative)[0] == default


def test_uci_har_source_reads_the_marker_in_the_readmes_first_2000_characters(tmp_path: Path):
    assert sensors.uci_har_source(tmp_path) == "official"
    readme = tmp_path / "README.md"
    for text, source in [
        ("Signals rebuilt from HAPT.", "rebuilt from HAPT"),
        ("REBUILT FROM THE hapt data", "rebuilt from HAPT"),
        ("rebuilt from the UCI data", "official"),
        ("x" * 1983 + "rebuilt from HAPT", "rebuilt from HAPT"),  # ends at character 2000
        ("x" * 1984 + "rebuilt from HAPT", "official"),
    ]:
        readme.write_text(text)
        assert sensors.uci_har_source(tmp_path) == source, text[-30:]
    readme.unlink()
    readme.mkdir()
    assert sensors.uci_har_source(tmp_path) == "official"


def write_split(folder: Path, split: str, labels: list[int], channels, seed: int = 0):
    """One split of UCI HAR's layout; the windows as float32 values written exactly."""
    rng = np.random.default_rng(seed)
    touch(folder / split / f"y_{split}.txt", "".join(f"{y}\n" for y in labels))
    windows = {}
    for c in channels:
        x = rng.normal(0, 0.5, (len(labels), 128)).astype(np.float32)
        text = "\n".join(" ".join(repr(float(v)) for v in row) for row in x) + "\n"
        touch(folder / split / "Inertial Signals" / f"{c}_{split}.txt", text)
        windows[c] = x
    return windows


def test_read_uci_har_split_stacks_the_channels_as_one_by_128_by_c(tmp_path: Path):
    windows = write_split(tmp_path, "train", [1, 6, 3], ["b", "a"])
    folder = tmp_path / "train"
    signal_files = [folder / "Inertial Signals" / f"{c}_train.txt" for c in ("b", "a")]
    x, y = sensors.read_uci_har_split(folder / "y_train.txt", signal_files)
    assert x.shape == (3, 1, 128, 2) and x.dtype == np.float32 and x.flags.c_contiguous
    assert np.array_equal(x[:, 0, :, 0], windows["b"]) and np.array_equal(
        x[:, 0, :, 1], windows["a"]
    )
    assert y.dtype == np.int64 and y.tolist() == [0, 5, 2]
    one = write_split(tmp_path, "one", [4], ["a"])  # a split of one window
    folder = tmp_path / "one"
    x, y = sensors.read_uci_har_split(folder / "y_one.txt", [folder / "Inertial Signals/a_one.txt"])
    assert np.array_equal(x[:, 0, :, 0], one["a"]) and y.tolist() == [3]


def test_read_uci_har_split_refuses_other_labels_and_windows(tmp_path: Path):
    write_split(tmp_path, "test", [1, 2], ["a"])
    labels = tmp_path / "test" / "y_test.txt"
    signal = tmp_path / "test" / "Inertial Signals" / "a_test.txt"
    for bad in ("0\n1\n", "1\n7\n", "1.5\n"):
        labels.write_text(bad)
        with pytest.raises(FedshareError, match=r"labels must be the activity ids 1\.\.6"):
            sensors.read_uci_har_split(labels, [signal])
    labels.write_text("1\n2\n3\n")
    with pytest.raises(
        FedshareError,
        match=r"holds 2×128 values, expected 3×128 \(one 128-step window per line of y_test\.txt",
    ):
        sensors.read_uci_har_split(labels, [signal])
    labels.write_text("1\n2\n")
    signal.write_text("1 2\n3 4\n")
    with pytest.raises(FedshareError, match="it holds 2×2 values, expected 2×128"):
        sensors.read_uci_har_split(labels, [signal])


def write_uci_har(parent: Path, channels=sensors.UCI_HAR_SIGNALS) -> dict:
    folder = parent / "UCI HAR Dataset"
    return {
        "train": (write_split(folder, "train", [1, 2, 6, 4], channels, 1), [0, 1, 5, 3]),
        "test": (write_split(folder, "test", [5, 3, 5], channels, 2), [4, 2, 4]),
    }


def test_load_uci_har_reads_both_splits_of_the_chosen_channels(tmp_path: Path, monkeypatch):
    spy = CacheSpy()
    monkeypatch.setattr(sensors, "cached", spy)
    truth = write_uci_har(tmp_path)
    request = LoadRequest(root=str(tmp_path), cache=False)
    data = sensors.load_uci_har(request)
    default = ("body_acc_x", "body_acc_y", "body_acc_z")
    for split in ("train", "test"):
        windows, labels = truth[split]
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        assert x.shape == (len(labels), 1, 128, 3) and y.tolist() == labels
        for k, c in enumerate(default):
            assert np.array_equal(x[:, 0, :, k].numpy(), windows[c])
    assert data.num_classes == 6 and data.default_model == "harnet" and data.source == "official"
    assert data.class_names == sensors.UCI_HAR_ACTIVITIES and data.name == "uci_har"
    name, key, paths, enabled = spy.calls[0]
    relative = sensors._split_files("train", default) + sensors._split_files("test", default)
    assert name == "uci_har" and paths == [tmp_path / r for r in relative] and enabled is False
    assert key == {"channels": list(default), "source": "official", "version": 1}
    picked = sensors.load_uci_har(request, channels=["total_acc_z", "body_gyro_x"])
    assert np.array_equal(picked.x_test[:, 0, :, 0].numpy(), truth["test"][0]["total_acc_z"])
    assert np.array_equal(picked.x_train[:, 0, :, 1].numpy(), truth["train"][0]["body_gyro_x"])
    assert spy.calls[1][3] is False and spy.calls[1][1]["channels"] == [
        "total_acc_z",
        "body_gyro_x",
    ]
    (tmp_path / "README.md").write_text("rebuilt from HAPT")
    rebuilt = sensors.load_uci_har(LoadRequest(root=str(tmp_path)))
    assert (
        rebuilt.source == "rebuilt from HAPT" and spy.calls[2][1]["source"] == "rebuilt from HAPT"
    )
    assert spy.calls[2][3] is True


def test_load_uci_har_refuses_unknown_channels_and_missing_files(tmp_path: Path, monkeypatch):
    request = LoadRequest(root=str(tmp_path))
    for bad in ([], ["acc_x"], ["body_acc_x", "body_acc_w"]):
        with pytest.raises(
            FedshareError,
            match=rf"data\.channels must list signals among body_acc_x, .*; got {re_list(bad)}",
        ):
            sensors.load_uci_har(request, channels=bad)
    with pytest.raises(FedshareError, match="dataset 'uci_har' not found"):
        sensors.load_uci_har(request)
    downloads = []

    def download(root):
        downloads.append(root)
        return tmp_path / "got"

    monkeypatch.setattr(sensors, "_download_uci_har", download)
    (tmp_path / "got").mkdir()
    with pytest.raises(FedshareError, match="the downloaded archive lacks them"):
        sensors.load_uci_har(replace(request, download=True))
    truth = write_uci_har(tmp_path / "got", ("body_acc_x", "body_acc_y", "body_acc_z"))
    data = sensors.load_uci_har(replace(request, download=True, cache=False))
    assert downloads == [str(tmp_path)] * 2
    assert data.y_test.tolist() == truth["test"][1]


def test_uci_hars_download_extracts_the_inner_zip(tmp_path: Path, monkeypatch):
    calls = []

    def fetch(url, root):
        calls.append((url, root))
        return tmp_path

    monkeypatch.setattr(sensors, "fetch_archive", fetch)
    assert sensors._download_uci_har("there") == tmp_path and not any(tmp_path.iterdir())
    with zipfile.ZipFile(tmp_path / "UCI HAR Dataset.zip", "w") as archive:
        archive.writestr("UCI HAR Dataset/train/y_train.txt", "1\n")
    assert sensors._download_uci_har("there") == tmp_path
    assert (tmp_path / "UCI HAR Dataset/train/y_train.txt").read_text() == "1\n"
    assert calls == [(sensors.UCI_HAR_URL, "there")] * 2


def re_list(values: list[str]) -> str:
    return str(values).replace("[", r"\[").replace("]", r"\]")


# ---------------------------------------------------------------------- feature_files.py


def test_resolve_path_takes_the_path_itself_then_each_data_root(tmp_path: Path, monkeypatch):
    env, default = tmp_path / "env", tmp_path / "default"
    monkeypatch.setenv(sources.DATA_ENV, str(env))
    monkeypatch.setattr(sources, "DEFAULT_ROOT", default)
    monkeypatch.chdir(tmp_path)
    touch(default / "f.pt")
    assert feature_files.resolve_path("f.pt", None) == default / "f.pt"
    touch(env / "f.pt")
    assert feature_files.resolve_path("f.pt", None) == env / "f.pt"
    touch(tmp_path / "f.pt")
    assert feature_files.resolve_path("f.pt", None) == Path("f.pt")
    mine = tmp_path / "mine"
    touch(mine / "g.npz")
    assert feature_files.resolve_path("g.npz", str(mine)) == mine / "g.npz"
    absolute = str(mine / "g.npz")
    assert feature_files.resolve_path(absolute, str(mine)) == mine / "g.npz"


def test_resolve_path_names_every_place_looked_or_what_is_there(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    with pytest.raises(FedshareError) as err:
        feature_files.resolve_path("h.pt", str(tmp_path / "mine"))
    assert str(err.value) == (
        f"features file 'h.pt' not found (looked for h.pt, {tmp_path / 'mine' / 'h.pt'}); save "
        "your features with torch.save or numpy.savez (keys x_train, y_train, x_test, y_test)"
    )
    with pytest.raises(FedshareError, match=r"\(looked for [^,]*/mine/a\.pt\);") as err:
        feature_files.resolve_path(str(tmp_path / "mine" / "a.pt"), str(tmp_path / "mine"))
    assert str(err.value).count("a.pt") == 2  # the path quoted once, looked for once
    (tmp_path / "mine" / "h.pt").mkdir()
    with pytest.raises(FedshareError, match=r"h\.pt is not a regular file \(a folder\)"):
        feature_files.resolve_path("h.pt", str(tmp_path / "mine"))


def features(n_train=4, n_test=3, d=2, classes=3, **extra) -> dict:
    x = torch.arange(float((n_train + n_test) * d)).reshape(-1, d)
    y = torch.arange(n_train + n_test) % classes
    return {
        "x_train": x[:n_train],
        "y_train": y[:n_train],
        "x_test": x[n_train:],
        "y_test": y[n_train:],
        **extra,
    }


def test_read_features_file_reads_pt_and_npz_dicts(tmp_path: Path):
    raw = features()
    torch.save(raw, tmp_path / "f.pt")
    got = feature_files.read_features_file(tmp_path / "f.pt")
    assert set(got) == set(raw) and all(torch.equal(got[k], raw[k]) for k in raw)
    np.savez(tmp_path / "f.npz", **{k: v.numpy() for k, v in raw.items()})
    got = feature_files.read_features_file(tmp_path / "f.npz")
    assert set(got) == set(raw) and np.array_equal(got["x_test"], raw["x_test"].numpy())


def test_read_features_file_refuses_what_it_cannot_read(tmp_path: Path):
    torch.save(torch.zeros(2), tmp_path / "t.pt")
    with pytest.raises(FedshareError, match=r"t\.pt must hold a dict, got Tensor"):
        feature_files.read_features_file(tmp_path / "t.pt")
    torch.save({**features(), "made": datetime.date(2020, 1, 1)}, tmp_path / "o.pt")
    with pytest.raises(FedshareError, match=r"o\.pt \(it is damaged or holds objects other than"):
        feature_files.read_features_file(tmp_path / "o.pt")  # only an unsafe load reads it
    (tmp_path / "e.pt").write_bytes(b"")
    with pytest.raises(FedshareError, match=r"e\.pt \(the file is empty or truncated\); save"):
        feature_files.read_features_file(tmp_path / "e.pt")
    (tmp_path / "z.npz").write_bytes(b"PK junk")
    with pytest.raises(FedshareError, match=r"z\.npz \(truncated, or not an npz \(zip\) archive\)"):
        feature_files.read_features_file(tmp_path / "z.npz")
    (tmp_path / "d.pt").mkdir()
    with pytest.raises(FedshareError, match="not a regular file"):
        feature_files.read_features_file(tmp_path / "d.pt")


def test_pick_takes_the_first_alias_present_as_a_tensor(tmp_path: Path):
    path = tmp_path / "f.pt"
    raw = {"features_train": np.array([[1.5]]), "train_features": torch.tensor([[2.0]])}
    assert torch.equal(feature_files._pick(raw, "x_train", path), torch.tensor([[2.0]]))
    del raw["train_features"]
    picked = feature_files._pick(raw, "x_train", path)
    assert torch.is_tensor(picked) and picked.tolist() == [[1.5]]
    flags = feature_files._pick({"labels_test": [True, False]}, "y_test", path)
    assert flags.tolist() == [True, False]
    with pytest.raises(FedshareError, match=r"f\.pt: labels_test holds <U1 values, not numbers"):
        feature_files._pick({"labels_test": np.array(["a"])}, "y_test", path)
    with pytest.raises(FedshareError) as err:
        feature_files._pick({"zz": 1, "aa": 2}, "y_train", path)
    assert str(err.value) == (
        f"features file {path} has no y_train (accepted keys: y_train, train_labels, "
        "labels_train); it has aa, zz"
    )


def test_load_one_converts_and_counts_the_classes(tmp_path: Path):
    path = tmp_path / "f.pt"
    raw = features(classes=3)
    raw["x_train"] = raw["x_train"].double()
    raw["y_test"] = raw["y_test"].int()
    torch.save(raw, path)
    out, classes, names = feature_files.load_one(path)
    assert classes == 3 and names is None  # labels up to 2
    assert out["x_train"].dtype == torch.float32 and out["y_test"].dtype == torch.int64
    assert torch.equal(out["x_train"], raw["x_train"].float())
    assert out["y_test"].tolist() == raw["y_test"].tolist()
    torch.save({**raw, "class_names": ["a", "b", "c", "d"]}, path)
    assert feature_files.load_one(path)[1:] == (4, ["a", "b", "c", "d"])
    torch.save({**raw, "class_names": ["a", "b", "c"], "num_classes": 5}, path)
    assert feature_files.load_one(path)[1] == 5
    torch.save(
        {**raw, "y_test": torch.zeros(0, dtype=torch.long), "x_test": torch.zeros(0, 2)}, path
    )
    assert feature_files.load_one(path)[1] == 3  # top label of the training side
    torch.save(
        {**raw, "y_train": torch.tensor([0, 1, 0, 1]), "y_test": torch.tensor([0, 0, 5])}, path
    )
    assert feature_files.load_one(path)[1] == 6  # top label of the test side
    empty = {"x_train": torch.zeros(0, 2), "y_train": torch.zeros(0, dtype=torch.long)}
    torch.save({**raw, **empty, "x_test": empty["x_train"], "y_test": empty["y_train"]}, path)
    assert feature_files.load_one(path)[1] == 0  # no labels, no classes
    torch.save({**raw, "class_names": []}, path)
    assert feature_files.load_one(path)[1] == 3  # no names: the labels count


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"x_train": torch.zeros(4)},
            r"x_train must be N×d and y_train N labels, got \(4,\) and \(4,\)",
        ),
        ({"y_test": torch.zeros(3, 1, dtype=torch.long)}, "x_test must be N×d and y_test N labels"),
        ({"y_train": torch.zeros(5, dtype=torch.long)}, r"got \(4, 2\) and \(5,\)"),
        ({"y_test": torch.zeros(3)}, "y_test must be non-negative integers"),
        ({"y_train": torch.tensor([0, 1, -1, 0])}, "y_train must be non-negative integers"),
        (
            {"x_test": torch.tensor([[0.0, 1.0], [float("nan"), 0.0], [0.0, 0.0]])},
            "x_test holds NaN",
        ),
        ({"x_train": torch.full((4, 2), float("inf"))}, "x_train holds NaN, infinite or complex"),
        (
            {"x_test": torch.zeros(3, 2, dtype=torch.complex64)},
            "x_test holds NaN, infinite or complex",
        ),
        ({"x_test": torch.zeros(3, 3)}, "train and test features differ in size"),
        ({"num_classes": 2}, "has labels up to 2 but declares 2 classes"),
        ({"class_names": ["a", "b"]}, "has labels up to 2 but declares 2 classes"),
        (
            {"num_classes": MAX_CLASSES + 1},
            f"has {MAX_CLASSES + 1} classes \\(labels up to 2\\), more than the {MAX_CLASSES}",
        ),
    ],
)
def test_load_one_refuses_bad_shapes_labels_and_values(tmp_path: Path, change, problem):
    path = tmp_path / "f.pt"
    torch.save({**features(), **change}, path)
    with pytest.raises(FedshareError, match=f"features file .*f\\.pt.*{problem}"):
        feature_files.load_one(path)


def test_load_one_accepts_up_to_max_classes(tmp_path: Path):
    path = tmp_path / "f.pt"
    torch.save({**features(), "num_classes": MAX_CLASSES}, path)
    assert feature_files.load_one(path)[1] == MAX_CLASSES
    torch.save({**features(), "y_test": torch.tensor([0, 0, MAX_CLASSES - 1])}, path)
    assert feature_files.load_one(path)[1] == MAX_CLASSES


def test_declared_classes_is_one_whole_positive_number(tmp_path: Path):
    path = tmp_path / "f.pt"
    for good, value in [(3, 3), (1, 1), (4.0, 4), (np.array([7]), 7), (torch.tensor(2), 2)]:
        got = feature_files.declared_classes(good, path)
        assert got == value and type(got) is int
    for bad in (0, -2, 2.5, float("nan"), float("inf"), [1, 2], "3", True, np.array([])):
        with pytest.raises(FedshareError, match="num_classes must be one whole number of classes"):
            feature_files.declared_classes(bad, path)


def save_features(path: Path, labels_train, labels_test, d=2, **extra) -> dict:
    raw = {
        "x_train": torch.randn(len(labels_train), d),
        "y_train": torch.tensor(labels_train),
        "x_test": torch.randn(len(labels_test), d),
        "y_test": torch.tensor(labels_test),
        **extra,
    }
    torch.save(raw, path)
    return raw


def test_load_features_file_concatenates_files_in_order(tmp_path: Path):
    a = save_features(tmp_path / "a.pt", [0, 2, 1], [1], class_names=["x", "y", "z"])
    b = save_features(tmp_path / "b.pt", [1, 0], [0, 1], num_classes=2)
    request = LoadRequest(root=str(tmp_path))
    shared = feature_files.load_features_file(request, path=["a.pt", "b.pt"])
    assert shared.name == "features:a+b" and shared.default_model == "linear"
    assert shared.num_classes == 3 and shared.class_names == ["x", "y", "z"]
    assert torch.equal(shared.x_train, torch.cat([a["x_train"], b["x_train"]]))
    assert torch.equal(shared.x_test, torch.cat([a["x_test"], b["x_test"]]))
    assert shared.y_train.tolist() == [0, 2, 1, 1, 0] and shared.y_test.tolist() == [1, 0, 1]
    union = feature_files.load_features_file(request, path=["a.pt", "b.pt"], disjoint_labels=True)
    assert union.num_classes == 5 and union.class_names == ["x", "y", "z", "class3", "class4"]
    assert union.y_train.tolist() == [0, 2, 1, 4, 3] and union.y_test.tolist() == [1, 3, 4]
    back = feature_files.load_features_file(request, path=["b.pt", "a.pt"], disjoint_labels=True)
    assert back.class_names == ["class0", "class1", "x", "y", "z"] and back.num_classes == 5
    assert back.y_train.tolist() == [1, 0, 2, 4, 3]
    one = feature_files.load_features_file(request, path="b.pt")
    assert one.name == "features:b" and one.num_classes == 2 and one.class_names is None
    wide = feature_files.load_features_file(request, path=["b.pt", "a.pt"])
    assert wide.num_classes == 3 and wide.class_names is None  # b's names: none


def test_load_features_file_drops_names_that_do_not_cover_the_classes(tmp_path: Path):
    save_features(tmp_path / "a.pt", [0, 1], [1], class_names=["p", "q"])
    save_features(tmp_path / "b.pt", [0, 3], [2])
    request = LoadRequest(root=str(tmp_path))
    shared = feature_files.load_features_file(request, path=["a.pt", "b.pt"])
    assert shared.num_classes == 4 and shared.class_names is None
    alone = feature_files.load_features_file(request, path=["a.pt"])
    assert alone.class_names == ["p", "q"]


def test_load_features_file_refuses_no_path_and_mixed_sizes(tmp_path: Path):
    request = LoadRequest(root=str(tmp_path))
    for empty in (None, "", []):
        with pytest.raises(FedshareError, match=r"data=features_file needs data\.path="):
            feature_files.load_features_file(request, path=empty)
    save_features(tmp_path / "a.pt", [0], [0], d=2)
    save_features(tmp_path / "b.pt", [0], [0], d=3)
    with pytest.raises(FedshareError, match=r"have different feature sizes \{2, 3\}"):
        feature_files.load_features_file(request, path=["a.pt", "b.pt"])


def test_contiguous_gives_each_client_its_block():
    labels = np.zeros(10, dtype=np.int64)
    rng = np.random.default_rng(0)
    blocks = feature_files.contiguous(labels, 3, rng)
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert all(b.dtype == np.int64 for b in blocks)
    sized = feature_files.contiguous(labels, 4, rng, sizes=[2, 0, 7, 1])
    assert [b.tolist() for b in sized] == [[0, 1], [], [2, 3, 4, 5, 6, 7, 8], [9]]
    assert all(b.dtype == np.int64 for b in sized)
    for bad in ([5, 5, 0], [5, 4, 0, 0], [6, 5, -1, 0], [5, 5, 0, 0, 0]):
        with pytest.raises(FedshareError) as err:
            feature_files.contiguous(labels, 4, rng, sizes=bad)
        assert str(err.value) == (
            f"partition.sizes={bad} must give 4 non-negative block sizes (one per client) "
            "summing to the 10 training samples"
        )
