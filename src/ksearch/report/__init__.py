"""Showing results: terminal tables, HTML reports, plots, export."""
