"""A job that prints its metric lines beside a real tqdm bar, as training stacks do.

``bar EPOCHS``: one tqdm bar per epoch on stderr (merged into stdout by the worker), redrawn
at every step; the epoch's metric line is printed while the bar is open (the line follows
the bar's last state, as a Lightning or Hugging Face callback's does) and, on odd epochs,
the bar is redrawn between the line's text and its newline (as another thread's redraw
can). ``long MIB``: MIB mebibytes with no line break, then a metric line, then more.
"""

import json
import sys

from tqdm import tqdm

STEPS = 20


def metric(epoch: int) -> str:
    return "FLEET_METRIC " + json.dumps({"epoch": epoch, "loss": 1 / (epoch + 1)})


def bars(epochs: int) -> None:
    for epoch in range(epochs):
        with tqdm(total=STEPS, desc=f"epoch {epoch}", mininterval=0, miniters=1) as bar:
            for step in range(STEPS):
                bar.update(1)
                if step == STEPS // 2 and epoch % 2 == 0:
                    print(metric(epoch))
                elif step == STEPS // 2:
                    sys.stdout.write(metric(epoch))
                    bar.refresh()
                    sys.stdout.write("\n")


def long(mib: int) -> None:
    for _ in range(mib):
        sys.stdout.write("." * (1 << 20))
    sys.stdout.write(metric(0) + "\n")
    sys.stdout.write("." * (1 << 20))


if __name__ == "__main__":
    {"bar": bars, "long": long}[sys.argv[1]](int(sys.argv[2]))
