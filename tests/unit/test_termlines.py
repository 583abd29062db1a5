"""A job's output as a terminal shows it (tasks.termlines): a bar's last state, and every
metric line wherever a bar left it, split at any chunk boundary, in bounded memory."""

import pytest

from tasks import termlines as T
from tasks.termlines import TermLine as L
from trainers import protocol as P

M = 'FLEET_METRIC {"epoch": 1, "loss": 0.5}'
BAR = " 45%|####5     | 45/100 [00:01<00:01, 30.0it/s]"
BAR2 = " 46%|####6     | 46/100 [00:01<00:01, 30.0it/s]"


@pytest.mark.parametrize(
    "output, lines",
    [
        (b"plain\nlines\n", [L("plain"), L("lines")]),
        (b"no newline at the end", [L("no newline at the end")]),
        (b"windows\r\nendings\r\n", [L("windows"), L("endings")]),
        (b"\n\n", [L(""), L("")]),  # empty lines are lines
        # a bar redrawn: the line shows its last state, not its first
        (f"\r{BAR}\r{BAR2}\n".encode(), [L(BAR2)]),
        # a metric line printed while a bar is open: after the bar's last state
        (f"\r{BAR}{M}\n".encode(), [L(BAR + M, M)]),
        # a bar redrawn between a print's text and its newline: the metric line is kept
        (f"{M}\r{BAR2}\n".encode(), [L(M, M), L(BAR2)]),
        (f"\r{BAR}\r{M}\r{BAR2}\n".encode(), [L(M, M), L(BAR2)]),
        (f"{M}\r\n".encode(), [L(M, M)]),
        # a bar wiped with spaces (tqdm's leave=False) still shows its last state
        (f"\r{BAR}\r{' ' * 50}\r\n".encode(), [L(BAR)]),
        (b"   \n", [L("   ")]),
        # a metric line cut by a redraw started one, so it is read (as a bad line); the
        # segments without the prefix are no metric line
        (
            f'FLEET_METRIC {{"loss": \r{BAR2}\r0.5}}\n'.encode(),
            [L('FLEET_METRIC {"loss": ', 'FLEET_METRIC {"loss": '), L("0.5}")],
        ),
        # colours and cursor moves are not text
        (f"\x1b[32m{M}\x1b[0m\n".encode(), [L(M, M)]),
        (f"\x1b[A\x1b[2K\r{BAR}\x1b[K\n".encode(), [L(BAR)]),
        ("naïve ✓\n".encode(), [L("naïve ✓")]),
        (b"\xff\xfe bytes\n", [L("\ufffd\ufffd bytes")]),
    ],
)
def test_output_splits_into_the_lines_a_terminal_shows_with_their_metric_lines(output, lines):
    assert T.split(output) == lines


@pytest.mark.parametrize("size", [1, 2, 7, 13, 64])
def test_chunks_of_any_size_give_the_same_lines(size):
    output = f"start\n\r{BAR}{M}\r{BAR2}\r\n\x1b[31mred\x1b[0m\r\n{M}\nend".encode()
    splitter = T.Splitter()
    got = []
    for i in range(0, len(output), size):
        got += splitter.feed(output[i : i + size])
    assert got + splitter.finish() == T.split(output)
    assert [line.metric for line in T.split(output) if line.metric] == [M, M]


def test_a_line_begun_in_one_chunk_ends_in_the_next_and_a_long_plain_line_is_cut():
    splitter = T.Splitter()
    assert splitter.feed(f"\r{BAR}\r{BAR2}".encode()) == []
    long = b"x" * (T.SHOWN_KEEP_BYTES + 10)
    got = splitter.feed(b"\nplain\n" + long + f"\n{M}\nhalf".encode()) + splitter.finish()
    assert [line.shown for line in got[:2]] == [BAR2, "plain"]
    assert got[2].shown.endswith(f"[cut: the line had {len(long)} bytes]") and not got[2].metric
    assert got[3:] == [L(M, M), L("half")]


def test_a_huge_line_with_no_break_is_shown_bounded_and_its_metric_line_still_found():
    splitter = T.Splitter()
    chunk = b"." * 65_536
    for _ in range(160):  # 10 MiB of dots, then a metric line
        assert splitter.feed(chunk) == []
    splitter.feed(M.encode())
    seg = splitter._seg
    assert len(seg.head) <= T.SHOWN_KEEP_BYTES and len(seg.metric) <= T.METRIC_KEEP_BYTES
    (line,) = splitter.feed(b"\n")
    assert line.metric == M and P.read_metric_line(line.metric).report == {"epoch": 1, "loss": 0.5}
    assert len(line.shown) == P.MAX_OUTPUT_LINE_CHARS
    assert line.shown.startswith("....")
    assert line.shown.endswith(f"[cut: the line had {160 * len(chunk) + len(M)} bytes]")


def test_a_metric_line_longer_than_its_limit_reads_too_long_not_cut_to_fit():
    huge = 'FLEET_METRIC {"x": "' + "é" * (P.MAX_METRIC_LINE_CHARS * 3) + '"}'
    (line,) = T.split(huge.encode() + b"\n")
    assert P.read_metric_line(line.metric).error is P.LineError.TOO_LONG
    fits = 'FLEET_METRIC {"x": "' + "é" * (P.MAX_METRIC_LINE_CHARS - 30) + '"}'
    (line,) = T.split(fits.encode() + b"\n")
    assert P.read_metric_line(line.metric).report["x"].startswith("éé")


def test_a_prefix_split_across_two_chunks_is_found():
    splitter = T.Splitter()
    data = f"{BAR}{M}\n".encode()
    cut = len(BAR) + 5  # inside "FLEET_METRIC "
    assert splitter.feed(data[:cut]) == []
    assert splitter.feed(data[cut:]) == [L(BAR + M, M)]
