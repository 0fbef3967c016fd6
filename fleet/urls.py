"""Human pages of the fleet app (all login-required)."""

from django.urls import path

from fleet import views

app_name = "fleet"

urlpatterns = [
    path("", views.host_list, name="host_list"),
    path("hosts/<uuid:code>/", views.host_detail, name="host_detail"),
]
