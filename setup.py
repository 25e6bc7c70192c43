"""Only what pyproject.toml cannot say: the wheel ships docs/*.md inside the package (tensorcad/docs/).

The MCP server lists them as resources (tensorcad://docs/...), read through importlib.resources
(tensorcad/mcp/resources.py); the docs are written once, in docs/ at the top of the repository.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithDocs(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "tensorcad" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for doc in sorted(Path(__file__).resolve().parent.joinpath("docs").glob("*.md")):
            self.copy_file(str(doc), str(target / doc.name))


setup(cmdclass={"build_py": BuildWithDocs})
