"""Static files of the run-watching page (served by treadle.api.watchpage)."""
