"""The lab's tests: the repository root (lab/ and lab/tests/ are packages, so pytest puts the root
on the path: the loop's modules and the lab's import as they do in the lab)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
