"""FastAPI routers: parse the request, call a service, map errors."""
