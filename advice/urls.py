"""URLs of the recommendation and upgrade-planner pages (all login-required).

Include from config/urls.py with ``path("", include("advice.urls"))``.
"""

from django.urls import path

from advice import views

app_name = "recommend"

urlpatterns = [
    path("hosts/<uuid:code>/recommend/", views.host_recommend, name="host"),
    path("plan/", views.plan_upgrade, name="plan"),
    path("plan/fleet/", views.plan_fleet, name="fleet"),
]
