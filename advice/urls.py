"""URLs of the recommendation and upgrade-planner pages (all login-required).

Include from config/urls.py with ``path("", include("audit.urls_recommend"))``.
"""

from django.urls import path

from audit import views_recommend as views

app_name = "recommend"

urlpatterns = [
    path("hosts/<uuid:code>/recommend/", views.host_recommend, name="host"),
    path("plan/", views.plan_upgrade, name="plan"),
    path("plan/fleet/", views.plan_fleet, name="fleet"),
]
