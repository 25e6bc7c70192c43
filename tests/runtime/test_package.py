"""tensorcad.runtime's public names stay functions, whatever submodules were imported first."""

import subprocess
import sys


def test_public_names_survive_submodule_imports():
    code = (
        "import importlib, tensorcad.runtime as r\n"
        "for m in ('building', 'building.scaling', 'building.generated', 'building.subject', 'building.settings',\n"
        "          'certification', 'certification.registry', 'certification.verification',\n"
        "          'certification.isolation', 'training', 'training.smoke', 'training.tracing'):\n"
        "    importlib.import_module('tensorcad.runtime.' + m)\n"
        "print(all(callable(getattr(r, n)) for n in ('scale', 'build', 'verify', 'trace', 'smoke_train',"
        " 'check_isolation', 'load_module', 'certify')))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.strip() == "True", run.stderr


def test_scale_needs_no_torch():
    code = "import sys; from tensorcad.runtime import scale; scale('llama-3-8b', 2_000_000); print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.strip() == "False", run.stderr
