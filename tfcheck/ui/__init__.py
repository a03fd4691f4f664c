"""Views: the report and traces rendered as text, rich, leak maps and CI annotations."""
