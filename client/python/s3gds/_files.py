"""Files being written to a mount: what a failed write leaves behind."""
import os


def discard(fd: int, path: str) -> None:
    """Close fd and remove path, ignoring their errors: a file whose write failed part-way.

    On a mount, closing uploads what the file took; removing it then leaves no partial object
    (and elsewhere, no partial file)."""
    for op in (lambda: os.close(fd), lambda: os.unlink(path)):
        try:
            op()
        except OSError:
            pass
