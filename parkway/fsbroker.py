"""The embedded broker: kombu's filesystem transport, with each message file written atomically.

kombu's own ``_put`` creates the message file under its final name and then writes it, so a consumer
polling the folder can move and read it while it is still empty; the worker then dies on
``JSONDecodeError`` ("Unrecoverable error"). Here the file is written under a name no queue matches and
renamed into place, so a reader sees a whole message or none. ``install()`` makes ``filesystem://`` mean
this transport in every process that imports the Celery app (API, workers, beat, Flower, the CLI).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps

ALIAS = "filesystem"
PATH = "parkway.fsbroker:Transport"


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write the message under a name no queue reads (``.partial-…``), then rename it into place."""
        folder = self.data_folder_out
        final = os.path.join(folder, f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg")
        partial = os.path.join(folder, f".partial-{uuid.uuid4().hex}")
        try:
            with open(partial, "wb") as handle:
                handle.write(str(dumps(payload)).encode())  # type: ignore[no-untyped-call]
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def install() -> None:
    """``filesystem://`` resolves to this transport from now on, in this process."""
    TRANSPORT_ALIASES[ALIAS] = PATH
