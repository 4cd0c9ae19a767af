"""Command-line interface; each command parses options and calls one public function."""
