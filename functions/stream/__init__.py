"""stream function (a web server behind the Lambda Web Adapter, see run.sh)."""
