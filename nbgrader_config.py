# nbgrader reads this file from the course root; the settings and the reasons for them are in
# autograder/nbgrader_settings.py.
from autograder.nbgrader_settings import configure

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file
configure(c)
