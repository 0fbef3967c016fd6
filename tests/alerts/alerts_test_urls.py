"""The project's URLs plus the alert pages, until config/urls.py includes them."""

from django.urls import include, path

from config.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    *[p for p in project_urlpatterns if "alerts" not in str(getattr(p, "pattern", ""))],
    path("alerts/", include("alerts.urls")),
]
