"""The `birder` command line and the report that ties the toolkit's three jobs together."""
