"""HostBuffer: a file under /dev/shm that stands in for device memory in tests."""

import mmap
import os
import tempfile

from . import _abi


class HostBuffer:
    """A shared-memory file the daemon writes into when its host stand-in
    backend is enabled (a test setting, never the default). read_into(buf, ...)
    sends its path in place of a CUDA IPC handle.

    The file is mapped and unlinked on close(), on leaving a ``with`` block, or
    when the object is collected. Release memoryviews from view() before closing.
    """

    def __init__(self, nbytes):
        if nbytes <= 0:
            raise ValueError(f"HostBuffer needs a positive size, not {nbytes}")
        fd, path = tempfile.mkstemp(prefix=f"s3gds-host-{os.getpid()}-", dir="/dev/shm")
        try:
            if len(path.encode()) >= _abi.IPC_HANDLE_LEN:
                raise ValueError(f"{path} does not fit in ipc_handle")
            os.ftruncate(fd, nbytes)
            self._map = mmap.mmap(fd, nbytes)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.name = path
        self.nbytes = nbytes

    def view(self):
        """A writable memoryview of the buffer's bytes."""
        return memoryview(self._map)

    def tobytes(self):
        return self._map[:]

    @property
    def closed(self):
        return self._map.closed

    def close(self):
        if self._map.closed:
            return
        try:
            os.unlink(self.name)
        except FileNotFoundError:
            pass
        self._map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_map", None) is not None:
            try:
                self.close()
            except BufferError:
                pass  # a view outlives the buffer; the mapping goes when the view does

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"HostBuffer({self.nbytes}, name={self.name!r}, {state})"
