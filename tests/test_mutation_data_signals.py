"""Fast exact tests of the signal loaders for mutation testing (docs/mutation.md, eleventh
session): data/wav.py, data/audio.py, data/sensors.py and data/feature_files.py.

Tiny files written to tmp_path in the official layouts and tiny synthetic tensors, no
simulation: each expected value is computed here from the definition (the RIFF layout, the IMA
ADPCM decoding rules, the seeded draws replayed by hand), so a changed sign, bound, count or
flag fails a test.
"""

import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from fedshare.data import wav
from fedshare.data.wav import IMA_INDEX_STEPS, IMA_STEPS
from fedshare.errors import FedshareError

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
    with pytest.raises(FedshareError) as err:
        wav._read_with_backend(tmp_path / "a.wav")
    message = str(err.value)
    assert message.startswith(f"cannot decode {tmp_path / 'a.wav'} (")
    assert "torchaudio: no codec; soundfile: " in message and "install torchcodec" in message
