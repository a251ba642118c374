"""A module that starts a thread when imported (a watchdog, a thread pool): unsafe to fork from."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), name="stand-in-watchdog", daemon=True).start()
