/* JNI glue of sluice.Model (bindings/java/src/sluice/Model.java) over the C API of
 * include/sluice/sluice.h. Texts cross as UTF-8 byte arrays (Java's String.getBytes(UTF_8)),
 * never as JNI "modified UTF-8", so that they reach the tokenizer byte for byte. A failed
 * sluice call throws sluice.SluiceException(code, message); a failed JNI allocation leaves
 * its pending OutOfMemoryError. */
#include <jni.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sluice.h"

static void throw_sluice(JNIEnv* env, int code) {
  jclass cls = (*env)->FindClass(env, "sluice/SluiceException");
  if (!cls) return;
  jmethodID ctor = (*env)->GetMethodID(env, cls, "<init>", "(ILjava/lang/String;)V");
  if (!ctor) return;
  jstring msg = (*env)->NewStringUTF(env, sluice_last_error());
  if (!msg) return;
  jobject ex = (*env)->NewObject(env, cls, ctor, (jint)code, msg);
  if (ex) (*env)->Throw(env, (jthrowable)ex);
}

static void throw_oom(JNIEnv* env) {
  jclass cls = (*env)->FindClass(env, "java/lang/OutOfMemoryError");
  if (cls) (*env)->ThrowNew(env, cls, "sluice_jni: out of memory");
}

/* A Java String (may be NULL) as a malloc'ed UTF-8 C string via String.getBytes is done on
 * the Java side for texts; options are ASCII, where modified UTF-8 is UTF-8. */
static char* opt_string(JNIEnv* env, jstring s, int* failed) {
  if (!s) return NULL;
  const char* c = (*env)->GetStringUTFChars(env, s, NULL);
  if (!c) {
    *failed = 1;
    return NULL;
  }
  char* out = strdup(c);
  (*env)->ReleaseStringUTFChars(env, s, c);
  if (!out) {
    *failed = 1;
    throw_oom(env);
  }
  return out;
}

static char* bytes_to_cstring(JNIEnv* env, jbyteArray b) {
  jsize n = (*env)->GetArrayLength(env, b);
  char* s = malloc((size_t)n + 1);
  if (!s) {
    throw_oom(env);
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, b, 0, n, (jbyte*)s);
  s[n] = 0;
  return s;
}

static jbyteArray cstring_to_bytes(JNIEnv* env, const char* s) {
  jsize n = (jsize)strlen(s);
  jbyteArray b = (*env)->NewByteArray(env, n);
  if (b) (*env)->SetByteArrayRegion(env, b, 0, n, (const jbyte*)s);
  return b;
}

static jintArray new_int_array(JNIEnv* env, const int32_t* v, size_t n) {
  jintArray a = (*env)->NewIntArray(env, (jsize)n);
  if (a && n) (*env)->SetIntArrayRegion(env, a, 0, (jsize)n, (const jint*)v);
  return a;
}

static jfloatArray new_float_array(JNIEnv* env, const float* v, size_t n) {
  jfloatArray a = (*env)->NewFloatArray(env, (jsize)n);
  if (a && n) (*env)->SetFloatArrayRegion(env, a, 0, (jsize)n, v);
  return a;
}

JNIEXPORT jint JNICALL Java_sluice_Model_nativeApiVersion(JNIEnv* env, jclass cls) {
  (void)env;
  (void)cls;
  return (jint)sluice_api_version();
}

JNIEXPORT jlong JNICALL Java_sluice_Model_nativeLoad(JNIEnv* env, jclass cls, jstring dir,
                                                     jstring task, jstring dtype, jstring device,
                                                     jint threads, jlong max_batch_tokens,
                                                     jint max_num_seqs) {
  (void)cls;
  int failed = 0;
  char* d = opt_string(env, dir, &failed);
  char* t = opt_string(env, task, &failed);
  char* dt = opt_string(env, dtype, &failed);
  char* dev = opt_string(env, device, &failed);
  sluice_model* m = NULL;
  if (!failed) {
    sluice_load_options o;
    sluice_load_options_init(&o);
    o.task = t;
    o.dtype = dt;
    o.device = dev;
    o.threads = threads;
    o.max_batch_tokens = max_batch_tokens;
    o.max_num_seqs = max_num_seqs;
    int code = sluice_model_load(d, &o, &m);
    if (code != SLUICE_OK) throw_sluice(env, code);
  }
  free(d);
  free(t);
  free(dt);
  free(dev);
  return (jlong)(intptr_t)m;
}

JNIEXPORT void JNICALL Java_sluice_Model_nativeFree(JNIEnv* env, jclass cls, jlong h) {
  (void)env;
  (void)cls;
  sluice_model_free((sluice_model*)(intptr_t)h);
}

JNIEXPORT jobjectArray JNICALL Java_sluice_Model_nativeInfo(JNIEnv* env, jclass cls, jlong h) {
  (void)cls;
  sluice_model* m = (sluice_model*)(intptr_t)h;
  sluice_model_info info;
  int code = sluice_model_get_info(m, &info);
  if (code != SLUICE_OK) {
    throw_sluice(env, code);
    return NULL;
  }
  jclass object = (*env)->FindClass(env, "java/lang/Object");
  jclass string = (*env)->FindClass(env, "java/lang/String");
  jclass boolean = (*env)->FindClass(env, "java/lang/Boolean");
  if (!object || !string || !boolean) return NULL;
  jobjectArray out = (*env)->NewObjectArray(env, 3, object, NULL);
  jobjectArray labels = (*env)->NewObjectArray(env, info.num_labels, string, NULL);
  if (!out || !labels) return NULL;
  for (int32_t k = 0; k < info.num_labels; ++k) {
    jstring s = (*env)->NewStringUTF(env, sluice_model_label(m, (size_t)k));
    if (!s) return NULL;
    (*env)->SetObjectArrayElement(env, labels, k, s);
  }
  jstring task = (*env)->NewStringUTF(env, info.task);
  jmethodID value_of = (*env)->GetStaticMethodID(env, boolean, "valueOf", "(Z)Ljava/lang/Boolean;");
  if (!task || !value_of) return NULL;
  jobject mv = (*env)->CallStaticObjectMethod(env, boolean, value_of, (jboolean)info.multi_vector);
  if (!mv) return NULL;
  (*env)->SetObjectArrayElement(env, out, 0, task);
  (*env)->SetObjectArrayElement(env, out, 1, labels);
  (*env)->SetObjectArrayElement(env, out, 2, mv);
  return out;
}

/* The sluice_input array of nativeRun's arguments; its buffers are freed by free_inputs. */
static sluice_input* make_inputs(JNIEnv* env, jobjectArray texts, jobjectArray pairs,
                                 jobjectArray ids, jobjectArray types, jsize n) {
  sluice_input* in = calloc((size_t)n + 1, sizeof *in);
  if (!in) {
    throw_oom(env);
    return NULL;
  }
  for (jsize i = 0; i < n; ++i) {
    jbyteArray t = (jbyteArray)(*env)->GetObjectArrayElement(env, texts, i);
    jbyteArray p = (jbyteArray)(*env)->GetObjectArrayElement(env, pairs, i);
    jintArray a = (jintArray)(*env)->GetObjectArrayElement(env, ids, i);
    jintArray ty = (jintArray)(*env)->GetObjectArrayElement(env, types, i);
    if (t) in[i].text = bytes_to_cstring(env, t);
    if (p) in[i].text_pair = bytes_to_cstring(env, p);
    if (a) {
      jsize k = (*env)->GetArrayLength(env, a);
      int32_t* v = malloc(((size_t)k + 1) * sizeof *v);
      if (v) (*env)->GetIntArrayRegion(env, a, 0, k, (jint*)v);
      in[i].ids = v;
      in[i].num_ids = (size_t)k;
    }
    if (ty) {
      jsize k = (*env)->GetArrayLength(env, ty);
      int32_t* v = malloc(((size_t)k + 1) * sizeof *v);
      if (v) (*env)->GetIntArrayRegion(env, ty, 0, k, (jint*)v);
      in[i].type_ids = v;
    }
    if ((t && !in[i].text) || (p && !in[i].text_pair) || (a && !in[i].ids) ||
        (ty && !in[i].type_ids)) {
      if (!(*env)->ExceptionCheck(env)) throw_oom(env);
    }
    if (t) (*env)->DeleteLocalRef(env, t);
    if (p) (*env)->DeleteLocalRef(env, p);
    if (a) (*env)->DeleteLocalRef(env, a);
    if (ty) (*env)->DeleteLocalRef(env, ty);
    if ((*env)->ExceptionCheck(env)) break;
  }
  return in;
}

static void free_inputs(sluice_input* in, jsize n) {
  if (!in) return;
  for (jsize i = 0; i < n; ++i) {
    free((void*)in[i].text);
    free((void*)in[i].text_pair);
    free((void*)in[i].ids);
    free((void*)in[i].type_ids);
  }
  free(in);
}

static jobjectArray result_to_java(JNIEnv* env, const sluice_result* r, int classify) {
  jclass object = (*env)->FindClass(env, "java/lang/Object");
  jclass float_array = (*env)->FindClass(env, "[F");
  jclass int_array = (*env)->FindClass(env, "[I");
  if (!object || !float_array || !int_array) return NULL;
  const size_t n = sluice_result_count(r);
  jobjectArray out = (*env)->NewObjectArray(env, classify ? 4 : 2, object, NULL);
  jobjectArray values = (*env)->NewObjectArray(env, (jsize)n, float_array, NULL);
  if (!out || !values) return NULL;
  (*env)->SetObjectArrayElement(env, out, 0, values);
  if (!classify) {
    int32_t* rows = malloc((n + 1) * sizeof *rows);
    if (!rows) {
      throw_oom(env);
      return NULL;
    }
    for (size_t i = 0; i < n; ++i) {
      size_t nr, dim;
      const float* v = sluice_result_values(r, i, &nr, &dim);
      rows[i] = (int32_t)nr;
      jfloatArray a = new_float_array(env, v, nr * dim);
      if (!a) break;
      (*env)->SetObjectArrayElement(env, values, (jsize)i, a);
      (*env)->DeleteLocalRef(env, a);
    }
    jintArray ra = (*env)->ExceptionCheck(env) ? NULL : new_int_array(env, rows, n);
    free(rows);
    if (!ra) return NULL;
    (*env)->SetObjectArrayElement(env, out, 1, ra);
    return out;
  }
  jobjectArray logits = (*env)->NewObjectArray(env, (jsize)n, float_array, NULL);
  jobjectArray over = (*env)->NewObjectArray(env, (jsize)n, int_array, NULL);
  jintArray best = (*env)->NewIntArray(env, (jsize)n);
  if (!logits || !over || !best) return NULL;
  for (size_t i = 0; i < n; ++i) {
    size_t nr, dim, nl, no;
    const float* p = sluice_result_values(r, i, &nr, &dim);
    const float* lg = sluice_result_logits(r, i, &nl);
    const int32_t* ov = sluice_result_labels_over_threshold(r, i, &no);
    jint b = sluice_result_label(r, i);
    jfloatArray pa = new_float_array(env, p, dim);
    jfloatArray la = new_float_array(env, lg, nl);
    jintArray oa = new_int_array(env, ov, no);
    if (!pa || !la || !oa) return NULL;
    (*env)->SetObjectArrayElement(env, values, (jsize)i, pa);
    (*env)->SetObjectArrayElement(env, logits, (jsize)i, la);
    (*env)->SetObjectArrayElement(env, over, (jsize)i, oa);
    (*env)->SetIntArrayRegion(env, best, (jsize)i, 1, &b);
    (*env)->DeleteLocalRef(env, pa);
    (*env)->DeleteLocalRef(env, la);
    (*env)->DeleteLocalRef(env, oa);
  }
  (*env)->SetObjectArrayElement(env, out, 1, logits);
  (*env)->SetObjectArrayElement(env, out, 2, best);
  (*env)->SetObjectArrayElement(env, out, 3, over);
  return out;
}

JNIEXPORT jobjectArray JNICALL Java_sluice_Model_nativeRun(JNIEnv* env, jclass cls, jlong h,
                                                           jint kind, jobjectArray texts,
                                                           jobjectArray pairs, jobjectArray ids,
                                                           jobjectArray types, jboolean truncate,
                                                           jint normalize, jint dimensions) {
  (void)cls;
  sluice_model* m = (sluice_model*)(intptr_t)h;
  const jsize n = (*env)->GetArrayLength(env, texts);
  sluice_input* in = make_inputs(env, texts, pairs, ids, types, n);
  if ((*env)->ExceptionCheck(env)) {
    free_inputs(in, n);
    return NULL;
  }
  sluice_run_options o;
  sluice_run_options_init(&o);
  o.truncate = truncate ? 1 : 0;
  o.normalize = normalize;
  o.dimensions = dimensions;
  jobjectArray out = NULL;
  if (kind == 0) {
    float* scores = malloc(((size_t)n + 1) * sizeof *scores);
    if (!scores) {
      throw_oom(env);
    } else {
      int code = sluice_score(m, in, (size_t)n, &o, scores);
      if (code != SLUICE_OK) {
        throw_sluice(env, code);
      } else {
        jclass object = (*env)->FindClass(env, "java/lang/Object");
        jfloatArray a = new_float_array(env, scores, (size_t)n);
        if (object && a) {
          out = (*env)->NewObjectArray(env, 1, object, NULL);
          if (out) (*env)->SetObjectArrayElement(env, out, 0, a);
        }
      }
      free(scores);
    }
  } else {
    sluice_result* r = NULL;
    int code = kind == 1 ? sluice_embed(m, in, (size_t)n, &o, &r)
                         : sluice_classify(m, in, (size_t)n, &o, &r);
    if (code != SLUICE_OK) {
      throw_sluice(env, code);
    } else {
      out = result_to_java(env, r, kind == 2);
    }
    sluice_result_free(r);
  }
  free_inputs(in, n);
  return out;
}

JNIEXPORT jobjectArray JNICALL Java_sluice_Model_nativeTokenize(JNIEnv* env, jclass cls, jlong h,
                                                                jbyteArray text, jbyteArray pair,
                                                                jboolean add_special) {
  (void)cls;
  char* a = bytes_to_cstring(env, text);
  char* b = pair ? bytes_to_cstring(env, pair) : NULL;
  jobjectArray out = NULL;
  if (a && (!pair || b)) {
    sluice_tokens* t = NULL;
    int code = sluice_tokenize((sluice_model*)(intptr_t)h, a, b, add_special ? 1 : 0, &t);
    if (code != SLUICE_OK) {
      throw_sluice(env, code);
    } else {
      const size_t n = sluice_tokens_count(t);
      jclass object = (*env)->FindClass(env, "java/lang/Object");
      jclass byte_array = (*env)->FindClass(env, "[B");
      jobjectArray toks =
          byte_array ? (*env)->NewObjectArray(env, (jsize)n, byte_array, NULL) : NULL;
      jintArray ids = new_int_array(env, sluice_tokens_ids(t), n);
      jintArray types = new_int_array(env, sluice_tokens_type_ids(t), n);
      jintArray offs = new_int_array(env, (const int32_t*)sluice_tokens_offsets(t), 2 * n);
      if (object && toks && ids && types && offs) {
        for (size_t i = 0; i < n; ++i) {
          jbyteArray s = cstring_to_bytes(env, sluice_tokens_token(t, i));
          if (!s) break;
          (*env)->SetObjectArrayElement(env, toks, (jsize)i, s);
          (*env)->DeleteLocalRef(env, s);
        }
        if (!(*env)->ExceptionCheck(env)) {
          out = (*env)->NewObjectArray(env, 4, object, NULL);
          if (out) {
            (*env)->SetObjectArrayElement(env, out, 0, ids);
            (*env)->SetObjectArrayElement(env, out, 1, types);
            (*env)->SetObjectArrayElement(env, out, 2, toks);
            (*env)->SetObjectArrayElement(env, out, 3, offs);
          }
        }
      }
    }
    sluice_tokens_free(t);
  }
  free(a);
  free(b);
  return out;
}
