"""The minisgl practice judge: exercises, a sandboxed runner, a terminal report and a web page."""
