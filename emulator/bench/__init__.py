"""`make bench`: performance figures as JSON, each beside a baseline measured in the same run."""
