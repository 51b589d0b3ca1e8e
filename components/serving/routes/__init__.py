"""The HTTP API's routes, one ``APIRouter`` per concern (health, devices, predict, rank), on one shared
``Service`` (``service.py``); ``components.serving.app.create_app`` assembles them."""
