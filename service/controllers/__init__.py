"""One controller per area of the API."""

from service.controllers.batches import BatchController
from service.controllers.grade import GradeController
from service.controllers.health import HealthController

__all__ = ["BatchController", "GradeController", "HealthController"]
