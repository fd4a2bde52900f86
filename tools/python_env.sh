# Sourced by the tools' shell scripts: which Python runs the project's tools.
#
# tools/setup.sh keeps the tools' Python packages in a virtual environment of
# the project's own, $FSDP_VENV (default <repository>/.venv), because Debian 12
# refuses pip installs into its system Python (PEP 668) and a user's Python
# should not be changed behind their back. $PYTHON, when set, names another
# interpreter that already has the packages (setup then installs none).
fsdp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fsdp_venv=${FSDP_VENV:-$fsdp_root/.venv}
fsdp_python=${PYTHON:-$fsdp_venv/bin/python}
