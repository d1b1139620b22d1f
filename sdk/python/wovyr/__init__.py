"""wovyr: the Python client of the wovyr sandboxed tool runtime's HTTP API.

    import wovyr
    c = wovyr.Client("http://127.0.0.1:8080", token)
    print(c.run(["python3", "-c", "print(6 * 7)"], trust="untrusted").text)

Standard library only. Errors are typed (wovyr.BadInput, wovyr.FloorUnmet, …).
"""

from .client import Client, Event, PluginResult, Result, Session
from .errors import (CLASSES, OOM, BackendFailure, BadInput, Conflict, FloorUnmet, Forbidden, Killed, Lost, NotFound,
                     OutOfFuel, PolicyUnenforceable, RateLimited, ResidencyUnmet, Timeout, TooLarge, Unauthenticated, Unavailable,
                     WovyrError)

__all__ = ["Client", "Event", "PluginResult", "Result", "Session", "WovyrError", "CLASSES", "BadInput", "FloorUnmet", "ResidencyUnmet",
           "PolicyUnenforceable",
           "BackendFailure", "Unauthenticated", "Forbidden", "NotFound", "Conflict", "TooLarge", "RateLimited",
           "Unavailable", "Timeout", "OOM", "OutOfFuel", "Killed", "Lost"]
__version__ = "0.1.0"
