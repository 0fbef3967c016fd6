"""The project's URLconf plus the recommendation pages (until config/urls.py includes them)."""

from django.urls import include, path

from config.urls import urlpatterns as project_urlpatterns

urlpatterns = [*project_urlpatterns, path("", include("advice.urls"))]
