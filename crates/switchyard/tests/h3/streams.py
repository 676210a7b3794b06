"""An aioquic HTTP/3 client that keeps its request streams open: what
tests/h3/websocket.py and tests/h3/stream.py share. A stream's response
head, DATA and end (or reset) are recorded as they come, and a caller
waits for what it needs with `until`."""

import asyncio
import ssl
import sys

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent, StreamReset


def target():
    """HOST, PORT, and the QUIC configuration that checks the server's
    certificate against CA_FILE for SERVER_NAME: a script's four fixed
    arguments."""
    host, port, ca, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
    cfg.load_verify_locations(ca)
    cfg.verify_mode = ssl.CERT_REQUIRED
    return host, port, name, cfg


class Stream:
    def __init__(self):
        self.headers, self.data, self.ended, self.reset = None, b"", False, None
        # A second HEADERS frame on the stream: the response's trailers.
        self.trailers = None
        self.changed = asyncio.Event()


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.streams = {}
        self.settings = asyncio.Event()

    def quic_event_received(self, event: QuicEvent):
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            s = self.streams[event.stream_id]
            s.reset = event.error_code
            s.changed.set()
        for e in self.http.handle_event(event):
            s = self.streams.get(getattr(e, "stream_id", None))
            if isinstance(e, HeadersReceived) and s is not None:
                if s.headers is None:
                    s.headers = e.headers
                else:
                    s.trailers = e.headers
            elif isinstance(e, DataReceived) and s is not None:
                s.data += e.data
            if s is not None:
                s.ended = s.ended or e.stream_ended
                s.changed.set()
        if self.http.received_settings is not None:
            self.settings.set()

    async def until(self, s, done, timeout=10):
        """Waits until done(s) holds, or the stream was reset or ended."""
        async def wait():
            while not done(s) and s.reset is None and not s.ended:
                s.changed.clear()
                await s.changed.wait()
        await asyncio.wait_for(wait(), timeout)
        return done(s)

    def open(self, headers, end):
        sid = self._quic.get_next_available_stream_id()
        self.streams[sid] = Stream()
        self.http.send_headers(stream_id=sid, headers=headers, end_stream=end)
        self.transmit()
        return sid, self.streams[sid]

    def send(self, sid, data, end=False):
        self.http.send_data(stream_id=sid, data=data, end_stream=end)
        self.transmit()

    def send_trailers(self, sid, fields):
        self.http.send_headers(stream_id=sid, headers=fields, end_stream=True)
        self.transmit()
