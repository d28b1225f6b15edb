"""One request on the wire: bytes out, SSE events in, every moment stamped.

The measuring path's lowest layer: `client.py` sends one request over `transport.py` (the one
module touching geventhttpclient's internals), `sse.py` splits the bytes into events,
`observe.py` (and `eventsobs.py`) stamp and count them, and `failures.py` names what went
wrong. It knows nothing of prompts, runs or Locust. `plainhttp.py` makes the small requests
outside the load.
"""
