"""Reports: the JSON report, the terminal table, the HTML page and the Markdown summary."""
