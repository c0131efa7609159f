"""Test infrastructure shared by the image and playbook tests: a private dockerd and cached images.

Nothing here installs packages: `.ci/run` installs the Debian packages listed in `.ci/apt-packages.txt`.
"""
