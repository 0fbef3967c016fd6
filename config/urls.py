"""URL configuration: human pages (login required), admin, and the agent API under /api/."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path

from fleet.api import api
from fleet.login_throttle import LoginView, ThrottledAdminAuthenticationForm
from front.prometheus import metrics as prometheus_metrics

# The admin's sign-in counts failures with the dashboard's (fleet.login_throttle).
admin.site.login_form = ThrottledAdminAuthenticationForm


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page says: send them to the static file."""
    return redirect(static("favicon.ico"), permanent=True)


urlpatterns = [
    # The agent API first: it answers every host every 30 s, and Django tries the patterns in
    # order (no other pattern starts with api/).
    path("api/", api.urls),
    path("favicon.ico", favicon),
    # Human pages (front), each concern's own pages (alerts, advice), agent distribution.
    path("", include("front.urls")),
    path("", include("front.urls_findings")),
    path("alerts/", include("alerts.urls")),
    path("", include("advice.urls")),
    # Agent install script and wheel (no login) and the admin's add-host page.
    path("agent/", include("fleet.urls_agent")),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Prometheus scrape (bearer PROMETHEUS_TOKEN; 404 when unset): front/prometheus.py.
    path("metrics", prometheus_metrics, name="prometheus_metrics"),
]
