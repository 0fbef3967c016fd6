"""Human pages of the fleet app (all login-required): overview, host detail, settings."""

from django.urls import path

from front import views_host, views_overview, views_probes, views_settings

app_name = "fleet"

urlpatterns = [
    path("", views_overview.overview, name="host_list"),
    path("hosts/<uuid:code>/", views_host.host_detail, name="host_detail"),
    path("hosts/<uuid:code>/probes/", views_probes.probe_policy, name="probe_policy"),
    path("settings/", views_settings.settings_index, name="settings"),
    path("settings/secrets/", views_settings.secret_create, name="secret_create"),
    path("settings/secrets/<int:pk>/", views_settings.secret_detail, name="secret_detail"),
    path("settings/secrets/<int:pk>/revoke/", views_settings.secret_revoke,
         name="secret_revoke"),
    path("settings/enrollments/<int:pk>/<str:decision>/", views_settings.enrollment_decide,
         name="enrollment_decide"),
    path("settings/tokens/<int:pk>/revoke/", views_settings.token_revoke, name="token_revoke"),
    path("settings/users/", views_settings.user_create, name="user_create"),
    path("settings/users/<int:pk>/role/", views_settings.user_role, name="user_role"),
    path("settings/users/<int:pk>/active/", views_settings.user_active, name="user_active"),
]
