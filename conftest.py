"""Repository-wide pytest configuration: the fixture models live in fixtures/ (see pyproject)."""
