"""What the page shows, built from a RunAnalysis: dicts of formatted strings and inline SVG for templates/index.html.

page.py assembles one run's page and fills the template; answers.py is the first screen; tables.py, breakdown.py,
box.py and costmodel_check.py the sections; figures.py draws the plots (matplotlib, SVG).
"""
