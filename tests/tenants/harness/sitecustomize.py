"""A user's own start-up hook: it must still run under auto-regions."""

import os

os.environ["USER_SITECUSTOMIZE_RAN"] = "1"
