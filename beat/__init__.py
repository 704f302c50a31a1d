"""The beat schedule and the recovery sweep."""
