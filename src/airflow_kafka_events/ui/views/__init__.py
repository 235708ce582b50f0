"""The view's JSON API (one module per page of the React page, each a FastAPI router), its bundle,
and the redirects of the addresses of pages the app no longer serves."""
