"""POST /run as NeMo Gym 0.7 calls an agent server's /run and reads its answer, checked with
NeMo Gym's own pydantic models (the nemo-gym package, .build/python-nemo-gym).

usage: nemo_gym_checks.py SERVER_URL MODEL_BASE_URL CHECK...   (one JSON line per check)
"""

import json
import sys
import urllib.request

from nemo_gym.base_resources_server import BaseRunRequest, BaseVerifyResponse
from nemo_gym.failure_kinds import is_namespaced, is_registered
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming

SERVER, MODEL = sys.argv[1], sys.argv[2]


def run(body):
    req = urllib.request.Request(f"{SERVER}/run", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as res:
        return json.loads(res.read())


def nemo_request(seed, max_retries=None):
    # The run request as NeMo Gym's rollout collection builds it: responses_create_params, then the task's fields.
    params = NeMoGymResponseCreateParamsNonStreaming(input=[{"role": "user", "content": "(the task comes from the env's item)"}], model="policy", temperature=1.0)
    request = BaseRunRequest(responses_create_params=params)
    body = request.model_dump(mode="json", exclude_none=True)
    model = {"base_url": MODEL, "model": "policy"}
    if max_retries is not None:
        model["max_retries"] = max_retries
    return {**body, "seed": seed, "model": model}


def scored():
    answer = run(nemo_request(0))
    verify = BaseVerifyResponse.model_validate(answer)
    output = verify.response.output
    trained = [item for item in output if getattr(item, "generation_token_ids", None) is not None]
    return {
        "reward": verify.reward,
        "mask_sample": verify.mask_sample,
        "failure_kind": verify.failure_kind,
        "types": [item.type for item in output],
        "token_items": len(trained),
        "turn_ids": [answer["turns"][i]["completion_token_ids"] == trained[i].generation_token_ids for i in range(len(trained))],
        "logprobs_match": all(len(t.generation_token_ids) == len(t.generation_log_probs) for t in trained),
        "prompt_ids": all(len(t.prompt_token_ids) > 0 for t in trained),
        "input_roles": [m["role"] for m in answer["responses_create_params"]["input"]],
    }


def infra():
    answer = run(nemo_request(0, max_retries=0))
    verify = BaseVerifyResponse.model_validate(answer)
    return {
        "reward": verify.reward,
        "mask_sample": verify.mask_sample,
        "failure_kind": verify.failure_kind,
        "kind_known": is_registered(verify.failure_kind) or is_namespaced(verify.failure_kind),
        "failure_reason": verify.failure_reason,
        "status": answer["status"],
    }


CHECKS = {"scored": scored, "infra": infra}

for name in sys.argv[3:]:
    try:
        out = {"check": name, "ok": True, **CHECKS[name]()}
    except Exception as e:  # noqa: BLE001 - reported to the test
        out = {"check": name, "ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out), flush=True)
