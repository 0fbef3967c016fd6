"""Alert pages (staff only). Included by config/urls.py as
``path("alerts/", include("alerts.urls"))``."""

from django.urls import path

from alerts import views as views_alerts

app_name = "alerts"

urlpatterns = [
    path("", views_alerts.channel_list, name="channels"),
    path("channels/new/", views_alerts.channel_create, name="channel_create"),
    path("channels/<uuid:code>/", views_alerts.channel_edit, name="channel_edit"),
    path("channels/<uuid:code>/test/", views_alerts.channel_test, name="channel_test"),
    path("deliveries/", views_alerts.delivery_log, name="deliveries"),
]
