"""Package discovery (all other metadata is in pyproject.toml).

Every package under sessionstore/ is found rather than listed, so a new subpackage cannot be
left out of the wheel; the top-level migrations/ folder is installed as
``sessionstore._migrations`` (its folders are mapped in pyproject.toml's package-dir).
"""

from setuptools import find_packages, setup

MIGRATIONS = "sessionstore._migrations"

setup(
    packages=[
        *find_packages(include=["sessionstore", "sessionstore.*"]),
        MIGRATIONS,
        *(f"{MIGRATIONS}.{name}" for name in find_packages("migrations")),
    ]
)
