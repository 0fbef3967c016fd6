"""URL configuration: human pages (login required), admin, and the agent API under /api/."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from fleet.api import api
from fleet.login_throttle import LoginView, ThrottledAdminAuthenticationForm

# The admin's sign-in counts failures with the dashboard's (fleet.login_throttle).
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("", include("fleet.urls")),
    path("", include("audit.urls")),
    # --- LEAD: alerts and recommendation includes go here -------------------------------
    path("alerts/", include("audit.urls_alerts")),
    path("", include("audit.urls_recommend")),
    # Agent install script and wheel (no login) and the admin's add-host page.
    path("agent/", include("fleet.urls_agent")),
    # --- end of lead's spot --------------------------------------------------------------
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
