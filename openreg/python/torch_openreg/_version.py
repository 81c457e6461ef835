# The torch release this package is built for; must match the pin in pyproject.toml
# (a test checks both against what _C was compiled with).
TORCH_VERSION = "2.15.0"
