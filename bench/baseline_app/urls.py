"""The baseline's two URLs: ``POST /baseline/reports`` and ``GET /baseline/health``.

The view is the floor cost of this stack for one report: Django's request cycle and
middleware, the same capped gzip reading as the product (``fleet.bodies``), ``json.loads``
and one ``INSERT`` of the JSON as jsonb under its unique report_id. No token, no
contract validation, no host/server/GPU upserts, no samples, no broker.
The table is created by ``bench/common.create_baseline_table``.
"""

from __future__ import annotations

import json

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from fleet.bodies import BodyError, read_capped_body
from fleet_agent.schema import MAX_REPORT_BYTES


@csrf_exempt
@require_POST
def store_report(request: HttpRequest) -> JsonResponse:
    """Insert the body as jsonb; 201 ``{"report_id": ...}``, 400/413 on a bad body."""
    try:
        body = read_capped_body(request, MAX_REPORT_BYTES)
        raw = json.loads(body)
    except BodyError as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    except ValueError:
        return JsonResponse({"error": "body is not valid JSON"}, status=400)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_baseline_report (report_id, raw) VALUES (%s, %s) "
                       "ON CONFLICT (report_id) DO NOTHING",
                       [raw["report_id"], json.dumps(raw)])
    return JsonResponse({"report_id": raw["report_id"]}, status=201)


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """200 once the server answers."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("baseline/reports", store_report),
    path("baseline/health", health),
]
